"""Warm start: demonstrations, the masked loss and step, policy checkpoints."""

import shutil

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import Tokenizer as RawTokenizer
from tokenizers import decoders, models as tokenizer_models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

import environments
from hf_reference import CHATML, random_hf_model
from jaxtree import models
from jaxtree.policy import load_policy
from jaxtree.rollout import RolloutConfig, SlotEngine, conversation
from jaxtree.rollout.strategies import sample_independent
from jaxtree.rollout.demonstrations import demonstrate
from jaxtree.tokenizers import ByteTokenizer, HFTokenizer
from jaxtree import checkpoints
from jaxtree.models.token_scores import TrainingMemory
from jaxtree.train.sft import make_optimizer, masked_nll, pad_batch, sft_step

TOK = ByteTokenizer()
# the reference loss jitted (eagerly, each of its operations would compile on its own)
_masked_nll = jax.jit(masked_nll, static_argnums=0)


@pytest.fixture(scope="module")
def model():
    """(config, params): the tiny preset with one decoder block instead of four, random init.
    The loss, the step and the checkpoint do not depend on the model's depth, and each program
    compiles about three times faster."""
    config = models.get_preset("tiny").replace(num_layers=1)
    return config, models.init_params(config, jax.random.key(0))


def test_demonstration_is_framed_like_a_rollout():
    env = environments.make("frozen_lake", style="compact")
    rng = np.random.default_rng(0)
    demo = demonstrate(env, TOK, seed=5, epsilon=0.0, rng=rng, max_tokens=10_000)
    # Rebuild from the conversation functions the engine uses, with the oracle's moves.
    replay = environments.make("frozen_lake", style="compact")
    replay.reset(5)
    expected = conversation.first_turn_tokens(TOK, replay)
    mask = [False] * len(expected)
    while not replay.done:
        text = replay.answer_text(replay.oracle_action())
        answer = conversation.action_tokens(TOK, text)
        expected += answer
        mask += [True] * len(answer)
        observation, _, done, _ = replay.step(text)
        if not done:
            following = conversation.next_turn_tokens(TOK, observation)
            expected += following
            mask += [False] * len(following)
    assert demo.tokens == expected and demo.loss_mask == mask
    assert demo.success and demo.num_turns == replay.num_steps


def test_demonstration_noise_rate():
    env = environments.make("frozen_lake", style="compact")
    rng = np.random.default_rng(1)
    clean = [demonstrate(env, TOK, s, 0.0, rng, 10_000).success for s in range(50)]
    noisy = [demonstrate(env, TOK, s, 1.0, rng, 10_000).success for s in range(50)]
    assert all(clean) and np.mean(noisy) < 0.5
    short = demonstrate(env, TOK, 3, 0.0, rng, max_tokens=100)
    assert len(short.tokens) <= 100 and not short.success


def test_masked_nll_matches_a_plain_reference(model):
    config, params = model
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 256, size=(3, 12)).astype(np.int32)
    mask = rng.random((3, 12)) < 0.5
    loss, metrics = _masked_nll(config, params, jnp.asarray(tokens), jnp.asarray(mask))
    logits = np.asarray(models.forward(config, params, jnp.asarray(tokens)), np.float64)
    total, count = 0.0, 0
    for b in range(3):
        for t in range(1, 12):
            if mask[b, t]:
                row = logits[b, t - 1]
                total += -(row[tokens[b, t]] - np.log(np.exp(row - row.max()).sum()) - row.max())
                count += 1
    np.testing.assert_allclose(float(loss), total / count, rtol=1e-5)
    assert float(metrics["target_tokens"]) == mask[:, 1:].sum()


def test_sft_step_learns_and_skips_non_finite_updates(model):
    config, params = model
    params = jax.tree_util.tree_map(jnp.copy, params)
    optimizer = make_optimizer(1e-2, 1, 20)
    opt_state = optimizer.init(params)
    tokens, mask = pad_batch([[1, 2, 3, 4, 5, 6]] * 4, [[False, False, True, True, True, True]] * 4,
                             TOK.pad_id)
    losses = []
    for _ in range(8):
        params, opt_state, metrics = sft_step(config, optimizer, params, opt_state, tokens, mask)
        losses.append(float(metrics["loss"]))
        assert int(metrics["skipped"]) == 0
    assert losses[-1] < 0.5 * losses[0]
    broken = jax.tree_util.tree_map(jnp.copy, params)
    broken["final_norm"]["scale"] = broken["final_norm"]["scale"].at[0].set(jnp.nan)
    before = jax.tree_util.tree_map(np.asarray, broken)
    after, _, metrics = sft_step(config, optimizer, broken, opt_state, tokens, mask)
    assert int(metrics["skipped"]) == 1
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), b),
                           after, before)


def test_policy_checkpoint_round_trip_and_errors(model, tmp_path):
    config, params = model
    path = checkpoints.save_policy(str(tmp_path), 7, params, config, "byte",
                                   extra={"job": "test"})
    loaded = load_policy(str(tmp_path))
    assert loaded.config == config and isinstance(loaded.tokenizer, ByteTokenizer)
    chex.assert_trees_all_equal(loaded.params, params)
    assert load_policy(path).config == config  # the step directory works too
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="does not exist"):
        checkpoints.load_policy_checkpoint(str(tmp_path / "missing"))
    empty = tmp_path / "empty" / "checkpoints"
    empty.mkdir(parents=True)
    with pytest.raises(checkpoints.CheckpointNotFoundError, match="no complete checkpoint"):
        checkpoints.load_policy_checkpoint(str(empty.parent))
    shutil.rmtree(tmp_path / "checkpoints" / "7" / "params")
    with pytest.raises(ValueError, match="incomplete or corrupt"):
        checkpoints.load_policy_checkpoint(path)


def _byte_level_bpe(directory):
    """A small byte-level BPE tokenizer with ChatML special tokens, trained on environment text."""
    raw = RawTokenizer(tokenizer_models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    corpus = [environments.make("frozen_lake").reset(s) for s in range(20)]
    corpus += ["Left Down Right Up <answer></answer>"] * 5
    raw.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|im_start|>", "<|im_end|>", "<|endoftext|>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>")
    fast.chat_template = CHATML
    fast.save_pretrained(str(directory))
    return fast


def test_sft_and_rollouts_work_for_hugging_face_checkpoints(tmp_path):
    """A transformers model with its own tokenizer, chat style: warm start a few steps, checkpoint,
    reload through load_policy and roll out with the slot engine."""
    hf_dir = tmp_path / "hf"
    fast = _byte_level_bpe(hf_dir)
    random_hf_model("qwen2", vocab_size=len(fast)).save_pretrained(str(hf_dir))
    policy = load_policy(str(hf_dir))
    assert isinstance(policy.tokenizer, HFTokenizer)
    env = environments.make("frozen_lake", style="chat")
    rng = np.random.default_rng(3)
    demos = [demonstrate(env, policy.tokenizer, s, 0.0, rng, 2048) for s in range(4)]
    assert all(d.success for d in demos)
    optimizer = make_optimizer(1e-3, 1, 2)
    params, opt_state = policy.params, optimizer.init(policy.params)
    tokens, mask = pad_batch([d.tokens for d in demos], [d.loss_mask for d in demos],
                             policy.tokenizer.pad_id)
    # a real vocabulary's memory knobs (remat, chunked logits), as configs for real models set
    memory = TrainingMemory(remat=True, logits_chunk=64)
    expected, _ = _masked_nll(policy.config, params, tokens, mask)
    for _ in range(2):
        params, opt_state, metrics = sft_step(policy.config, optimizer, params, opt_state,
                                              tokens, mask, memory)
        if _ == 0:
            np.testing.assert_allclose(metrics["loss"], expected, rtol=1e-5)
    assert np.isfinite(float(metrics["loss"]))
    checkpoints.save_policy(str(tmp_path / "work"), 2, params, policy.config,
                            policy.tokenizer_spec)
    reloaded = load_policy(str(tmp_path / "work"))
    assert isinstance(reloaded.tokenizer, HFTokenizer)
    # two turns (the second appends an observation to the cache), not the lake's ten
    engine = SlotEngine(reloaded.config, reloaded.tokenizer,
                        lambda: environments.make("frozen_lake", style="chat"),
                        RolloutConfig(num_slots=2, context_length=1024, max_action_tokens=8,
                                      max_turns=2))
    batch = sample_independent(engine, reloaded.params, jax.random.key(0), [0], 2)
    assert len(batch) == 2 and batch.num_turns.min() >= 1
