"""The batched sampler against plain-Python references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from jaxtree import models
from jaxtree.sampling import (CACHE_FULL, Sampler, SamplingConfig, decode_jit,
                              half_step_bucket, sample_tokens, sampling_log_probs)
from jaxtree.tokenizers import ByteTokenizer

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def model():
    """(config, params): the tiny preset with one decoder block instead of four, random init.
    The sampler's checks do not depend on the model's depth, and each of its programs compiles
    about three times faster."""
    config = models.get_preset("tiny").replace(num_layers=1)
    return config, models.init_params(config, jax.random.key(0))


# ----------------------------------------------------------------------------- references

def reference_keep_mask(logits: np.ndarray, temperature: float, top_k: int, top_p: float):
    """Plain transcription of temperature -> top-k -> top-p on one row (float64)."""
    x = logits.astype(np.float64) / temperature
    keep = np.ones(len(x), bool)
    if top_k and top_k < len(x):
        kth = sorted(x, reverse=True)[top_k - 1]
        keep &= x >= kth
    if top_p < 1:
        masked = np.where(keep, x, -np.inf)
        probs = np.exp(masked - masked.max())
        probs /= probs.sum()
        mass, threshold = 0.0, None
        for i in sorted(range(len(x)), key=lambda i: -masked[i]):
            threshold = masked[i]
            mass += probs[i]
            if mass >= top_p:
                break
        keep &= masked >= threshold
    return keep


REFERENCE_WIDTH = 40  # every reference forward is right-padded to this width: one compilation


def full_forward_logits(config, params, sequence):
    """Logits of a full forward over `sequence`, float32[len, V]. Right padding never changes
    earlier positions."""
    assert len(sequence) <= REFERENCE_WIDTH
    padded = np.zeros((1, REFERENCE_WIDTH), np.int32)
    padded[0, :len(sequence)] = sequence
    return np.asarray(models.forward(config, params, jnp.asarray(padded)))[0, :len(sequence)]


def greedy_reference(config, params, prompt, steps):
    """Greedy decoding by full forwards without a cache, one token at a time."""
    seq = list(prompt)
    for _ in range(steps):
        seq.append(int(np.argmax(full_forward_logits(config, params, seq)[-1])))
    return seq[len(prompt):]


def log_softmax(logits):
    x = np.asarray(logits, np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def prompts_of(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [[TOK.bos_id] + rng.integers(0, 256, size=n - 1).tolist() for n in lengths]


# ----------------------------------------------------------------------------- logits processing

@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), vocab=st.sampled_from([2, 7, 33]),
       temperature=st.sampled_from([0.3, 2.5]), top_k=st.sampled_from([0, 1, 5, 50]),
       top_p=st.sampled_from([1.0, 0.9, 0.3]), ties=st.booleans())
def test_sampling_distribution_matches_reference(seed, vocab, temperature, top_k, top_p, ties):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(3, vocab)).astype(np.float32) * 3
    if ties:
        logits = np.round(logits)
    sampling = SamplingConfig(temperature, top_k, top_p)
    # eagerly: jitted, every example's settings would compile a program of their own
    logp = np.asarray(sampling_log_probs(jnp.asarray(logits), sampling))
    for row, got in zip(logits, logp):
        keep = reference_keep_mask(row, temperature, top_k, top_p)
        np.testing.assert_array_equal(np.isfinite(got), keep)
        scaled = row.astype(np.float64)[keep] / temperature
        expected = scaled - np.log(np.sum(np.exp(scaled - scaled.max()))) - scaled.max()
        np.testing.assert_allclose(got[keep], expected, atol=1e-5)


def test_hand_made_logits():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = jnp.asarray(np.log(probs)[None], jnp.float32)
    dist = lambda **kw: np.exp(np.asarray(sampling_log_probs(logits, SamplingConfig(**kw)))[0])
    np.testing.assert_allclose(dist(), probs, rtol=1e-6)
    np.testing.assert_allclose(dist(top_k=2), [0.625, 0.375, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(dist(top_p=0.75), [0.625, 0.375, 0, 0], rtol=1e-6)
    np.testing.assert_allclose(dist(top_p=0.9), [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0],
                               rtol=1e-6)
    np.testing.assert_allclose(dist(top_p=0.4), [1, 0, 0, 0], rtol=1e-6)
    sharpened = probs ** 2 / np.sum(probs ** 2)
    np.testing.assert_allclose(dist(temperature=0.5), sharpened, rtol=1e-5)
    np.testing.assert_allclose(dist(temperature=0.0), [1, 0, 0, 0])
    # top-k never splits a tie at its cut.
    tied = jnp.asarray([[2.0, 1.0, 1.0, 0.0]])
    kept = np.isfinite(np.asarray(sampling_log_probs(tied, SamplingConfig(top_k=2))))[0]
    np.testing.assert_array_equal(kept, [True, True, True, False])


def test_invalid_sampling_config_names_the_field():
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=0.0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingConfig(top_k=-3)


def test_sample_tokens_frequencies_match_distribution():
    """Inverse-CDF draws over many rows reproduce the sampling distribution."""
    rows = 20000
    logits = jnp.tile(jnp.log(jnp.asarray([[0.4, 0.25, 0.2, 0.1, 0.05]])), (rows, 1))
    uniforms = jax.random.uniform(jax.random.key(0), (rows,))
    for sampling, expected in [
        (SamplingConfig(), [0.4, 0.25, 0.2, 0.1, 0.05]),
        (SamplingConfig(top_k=2), [0.4 / 0.65, 0.25 / 0.65, 0, 0, 0]),
    ]:
        tokens, _, _ = sample_tokens(uniforms, logits, sampling)
        counts = np.bincount(np.asarray(tokens), minlength=5)
        _assert_counts_match(counts, np.asarray(expected))


def _assert_counts_match(counts, probs):
    """Chi-square goodness of fit at p = 1e-4 over the tokens with non-zero probability, and no
    draw at all of a zero-probability token."""
    n = counts.sum()
    assert np.all(counts[probs == 0] == 0)
    support = probs > 0
    chi2 = np.sum((counts[support] - n * probs[support]) ** 2 / (n * probs[support]))
    bound = stats.chi2.ppf(1 - 1e-4, df=int(support.sum()) - 1)
    assert chi2 < bound, (chi2, bound, counts, n * probs)


# ----------------------------------------------------------------------------- the sampler

def _first_stop(free, budget, stops, eos_ids):
    """A greedy row's expected end: its free continuation cut at the first EOS, else the first
    completed stop sequence, else its budget. Returns (tokens, finish reason)."""
    for i in range(1, budget + 1):
        if free[i - 1] in eos_ids:
            return free[:i], "eos"
        if any(free[max(0, i - len(q)):i] == q for q in stops):
            return free[:i], "stop_sequence"
    return free[:budget], "max_tokens"


def test_greedy_matches_python_loop_of_full_forwards_until_eos_stop_or_budget(model):
    """Greedy rows of several prompt lengths (1 to 12: two prompt buckets) equal a Python loop
    of full forwards, each ending at the EOS, at its own stop sequence or at its own budget;
    their behaviour log-probs are those of a teacher-forced forward."""
    config, params = model
    steps = 12
    prompts = prompts_of([6, 3, 12, 1])
    free = [greedy_reference(config, params, p, steps) for p in prompts]
    eos = free[1][3]
    stop = free[0][4:6]  # a two-token sequence row 0 generates at steps 4-5
    stops = [[stop, [999]], [], [], []]
    budgets = [steps, steps, steps, 5]
    sampler = Sampler(config, SamplingConfig(temperature=0.0), steps, pad_id=TOK.pad_id,
                      eos_ids=[eos])
    result = sampler.generate(params, prompts, jax.random.key(0), max_new_tokens=budgets,
                              stop_sequences=stops)
    expected = [_first_stop(f, b, s, [eos]) for f, b, s in zip(free, budgets, stops)]
    assert [r for _, r in expected] == ["stop_sequence", "eos", "max_tokens", "max_tokens"]
    assert len(expected[2][0]) == steps  # one row runs the whole limit
    for prompt, tokens, logp, slogp, reason, (want, want_reason) in zip(
            prompts, result.tokens, result.policy_logprobs, result.sampling_logprobs,
            result.finish_reasons, expected):
        assert tokens == want and reason == want_reason
        # Behaviour log-probs are those of a teacher-forced forward over the final sequence.
        logits = full_forward_logits(config, params, prompt + tokens)
        ref = log_softmax(logits[len(prompt) - 1:-1])
        np.testing.assert_allclose(logp, ref[np.arange(len(tokens)), tokens], atol=1e-4)
        np.testing.assert_array_equal(slogp, 0.0)  # greedy: the chosen token has probability 1


# The sampler settings of the tests below: temperature, top-k and top-p all active. Every test
# that samples with it uses one of three programs: batch bucket 4 and prompt bucket 16 at
# LIMIT or SHORT_LIMIT tokens, and batch bucket 2, prompt bucket 8 at LIMIT.
SAMPLING = SamplingConfig(temperature=0.7, top_k=40, top_p=0.95)
LIMIT, SHORT_LIMIT = 24, 10
_jit_log_probs = jax.jit(sampling_log_probs, static_argnums=1)


def test_sampled_log_probs_match_teacher_forcing(model):
    config, params = model
    prompts = prompts_of([4, 9, 2])
    sampler = Sampler(config, SAMPLING, LIMIT, pad_id=TOK.pad_id)
    result = sampler.generate(params, prompts, jax.random.key(1))
    for prompt, tokens, logp, slogp in zip(prompts, result.tokens, result.policy_logprobs,
                                           result.sampling_logprobs):
        logits = full_forward_logits(config, params, prompt + tokens)[len(prompt) - 1:-1]
        steps = np.arange(len(tokens))
        ref_policy = log_softmax(logits)[steps, tokens]
        ref_sampling = np.asarray(_jit_log_probs(jnp.asarray(logits), SAMPLING))[steps, tokens]
        np.testing.assert_allclose(logp, ref_policy, atol=1e-4)
        np.testing.assert_allclose(slogp, ref_sampling, atol=1e-4)
        assert np.all(np.isfinite(slogp))


def _peaked_model():
    """A small-vocabulary model whose next-token distribution is far from uniform."""
    config = models.ModelConfig(vocab_size=6, hidden_size=16, intermediate_size=32, num_layers=1,
                                num_heads=2, num_kv_heads=1, head_dim=8)
    params = models.init_params(config, jax.random.key(3))
    params = jax.tree_util.tree_map(lambda x: x * 40 if x.ndim == 2 else x, params)
    return config, params


@pytest.mark.parametrize("sampling", [SamplingConfig(), SamplingConfig(temperature=1.5, top_k=4),
                                      SamplingConfig(top_p=0.8)])
def test_first_token_frequencies_match_softmax(sampling):
    config, params = _peaked_model()
    prompt = [1, 4, 2]
    probs = np.exp(np.asarray(sampling_log_probs(
        jnp.asarray(full_forward_logits(config, params, prompt)[-1:]), sampling))[0])
    assert probs.max() < 0.9 and np.sum(probs > 0.02) >= 2, probs  # a non-trivial distribution
    rows = 3000
    sampler = Sampler(config, sampling, 1, pad_id=0)
    result = sampler.generate(params, [prompt] * rows, jax.random.key(4))
    counts = np.bincount([t[0] for t in result.tokens], minlength=config.vocab_size)
    _assert_counts_match(counts, probs.astype(np.float64))


def test_zero_budget_rows_generate_nothing(model):
    config, params = model
    sampler = Sampler(config, SAMPLING, SHORT_LIMIT, pad_id=TOK.pad_id)
    result = sampler.generate(params, prompts_of([4, 7, 16]), jax.random.key(0),
                              max_new_tokens=[0, SHORT_LIMIT, 3])
    assert result.tokens[0] == [] and result.finish_reasons[0] == "max_tokens"
    assert [len(t) for t in result.tokens[1:]] == [SHORT_LIMIT, 3]


def test_same_key_same_output_and_rows_independent_of_batch(model):
    config, params = model
    sampler = Sampler(config, SAMPLING, LIMIT, pad_id=TOK.pad_id)
    prompts = prompts_of([4, 7, 16])
    a = sampler.generate(params, prompts, jax.random.key(7))
    b = sampler.generate(params, prompts, jax.random.key(7))
    c = sampler.generate(params, prompts, jax.random.key(8))
    assert a.tokens == b.tokens
    assert a.tokens != c.tokens
    # Fewer rows, a smaller batch bucket and a shorter prompt bucket: rows 0-1 are unchanged.
    d = sampler.generate(params, prompts[:2], jax.random.key(7))
    assert d.tokens == a.tokens[:2]
    for x, y in zip(d.policy_logprobs, a.policy_logprobs[:2]):
        np.testing.assert_allclose(x, y, atol=1e-5)
    # A sampler with a shorter token limit draws the same tokens up to its limit.
    short = Sampler(config, SAMPLING, SHORT_LIMIT, pad_id=TOK.pad_id)
    e = short.generate(params, prompts, jax.random.key(7))
    assert e.tokens == [t[:SHORT_LIMIT] for t in a.tokens]


def test_recompiles_are_bounded_by_buckets(model):
    config, params = model
    sampler = Sampler(config, SAMPLING, LIMIT, pad_id=TOK.pad_id)
    key = jax.random.key(0)
    sampler.generate(params, prompts_of([9, 12, 16]), key)  # batch bucket 4, prompt bucket 16
    sampler.generate(params, prompts_of([10, 13, 11, 14]), key)  # same buckets
    assert sampler.num_compiles == 1
    sampler.generate(params, prompts_of([3, 5]), key)  # batch 2, prompt bucket 8
    sampler.generate(params, prompts_of([8, 1]), key)
    assert sampler.num_compiles == 2
    assert [e.key for e in sampler.compile_events] == [(4, 16, 1, 1, 16 + LIMIT),
                                                       (2, 8, 1, 1, 8 + LIMIT)]


def test_invalid_requests_fail_clearly(model):
    config, params = model
    sampler = Sampler(config, SamplingConfig(), 4, pad_id=TOK.pad_id)
    with pytest.raises(ValueError, match="empty"):
        sampler.generate(params, [[1, 2], []], jax.random.key(0))
    with pytest.raises(ValueError, match="max_new_tokens"):
        sampler.generate(params, [[1, 2]], jax.random.key(0), max_new_tokens=5)
    with pytest.raises(ValueError, match="stop_sequences"):
        sampler.generate(params, [[1, 2]], jax.random.key(0), stop_sequences=[[], []])


def test_decode_continues_a_cache_until_it_is_full(model):
    """decode() on a prefilled cache: a row that reaches the capacity stops as cache_full, every
    generated token is in the cache, and last_logits predict the token after the last one."""
    config, params = model
    prompts = prompts_of([10, 4])
    capacity = 16
    tokens = np.full((2, 10), TOK.pad_id, np.int32)
    for b, p in enumerate(prompts):
        tokens[b, :len(p)] = p
    cache = models.init_cache(config, 2, capacity)
    logits, cache = models.extend_cache(config, params, cache, jnp.asarray(tokens),
                                        jnp.asarray([10, 4], jnp.int32), last_only=True)
    cache, out = decode_jit(config, SamplingConfig(temperature=0.0), 8, TOK.pad_id, params, cache,
                            logits, jax.random.split(jax.random.key(0), 2),
                            jnp.asarray([8, 8], jnp.int32), jnp.full((2, 1, 1), -1, jnp.int32),
                            jnp.zeros((0,), jnp.int32))
    n = np.asarray(out.num_generated)
    assert n.tolist() == [6, 8]
    assert int(out.finish_reason[0]) == CACHE_FULL
    np.testing.assert_array_equal(np.asarray(cache.lengths), [16, 12])
    for b, p in enumerate(prompts):
        generated = np.asarray(out.tokens[b, :n[b]]).tolist()
        assert generated == greedy_reference(config, params, p, int(n[b]))
        ref = full_forward_logits(config, params, p + generated)[-1]
        np.testing.assert_allclose(np.asarray(out.last_logits[b]), ref, atol=1e-4)

    # Decoding again: the full row generates nothing, the other continues from its last logits.
    last = out.last_logits
    cache, again = decode_jit(config, SamplingConfig(temperature=0.0), 8, TOK.pad_id, params, cache,
                              last, jax.random.split(jax.random.key(1), 2),
                              jnp.asarray([8, 8], jnp.int32), jnp.full((2, 1, 1), -1, jnp.int32),
                              jnp.zeros((0,), jnp.int32))
    assert np.asarray(again.num_generated).tolist() == [0, 4]
    assert int(again.finish_reason[0]) == CACHE_FULL
    np.testing.assert_array_equal(np.asarray(cache.lengths), [16, 16])
    np.testing.assert_array_equal(np.asarray(again.last_logits[0]), np.asarray(last[0]))


def test_half_step_buckets_pad_by_at_most_a_third():
    assert [half_step_bucket(n) for n in (1, 8, 9, 13, 23, 25, 33, 45, 49, 97)] == \
        [8, 8, 12, 16, 24, 32, 48, 48, 64, 128]
    shapes = {2 ** k for k in range(3, 12)} | {3 * 2 ** k for k in range(2, 11)}
    for n in range(8, 2049):
        width = half_step_bucket(n)
        assert width in shapes and n <= width
        assert width == min(s for s in shapes if s >= n)
        assert width - n < n / 2   # padding < a third of the width
