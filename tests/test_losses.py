"""Policy losses against plain-Python transcriptions of the paper objectives and hand-checked cases.

The references loop over rows and tokens in float64 and compute each objective directly in the
form of its paper (a mean of per-sequence means, a mean over all tokens, a sum over a constant),
not through per-token weights, so they check the weight formulation rather than restate it.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxtree import losses
from jaxtree.losses import AGGREGATIONS

EPS_LOW, EPS_HIGH = 0.2, 0.28
NORM = 7.0  # Dr.GRPO constant C of the seq-sum references


# ----------------------------------------------------------------------------- references


def ref_clip(x, lo, hi):
    return max(lo, min(x, hi))


def ref_token_objective(lp, old, adv, eps_low, eps_high):
    """ℓ = min(ρA, clip(ρ, 1-ε_low, 1+ε_high)A), and whether the clipped branch is smaller."""
    ratio = math.exp(lp - old)
    unclipped = ratio * adv
    clipped = ref_clip(ratio, 1 - eps_low, 1 + eps_high) * adv
    return min(unclipped, clipped), clipped < unclipped


def ref_k3(lp, ref):
    """π_ref/π_θ - log(π_ref/π_θ) - 1."""
    return math.exp(ref - lp) - (ref - lp) - 1


def ref_loss(mode, lp, old, adv, mask, *, eps_low=EPS_LOW, eps_high=EPS_HIGH, norm=NORM,
             ref=None, beta=0.0, entropy=None, ent_coef=0.0):
    """-J with J the objective of `mode` written as in its paper, token term
    ℓ - β k3 + c H (PATR Eq. 2 / LATR Eq. 2 with a KL penalty, LATR Eq. 4, Dr.GRPO)."""
    n, t = len(mask), len(mask[0])

    def term(i, j):
        value, _ = ref_token_objective(lp[i][j], old[i][j], adv[i][j], eps_low, eps_high)
        if ref is not None:
            value -= beta * ref_k3(lp[i][j], ref[i][j])
        if entropy is not None:
            value += ent_coef * entropy[i][j]
        return value

    rows = [i for i in range(n) if any(mask[i])]
    if not rows:
        return 0.0
    if mode == "seq-mean-token-mean":  # (1/G) Σ_i (1/|s_i|) Σ_t
        objective = 0.0
        for i in rows:
            tokens = [j for j in range(t) if mask[i][j]]
            objective += sum(term(i, j) for j in tokens) / len(tokens)
        objective /= len(rows)
    elif mode == "token-mean":  # (1/Σ_i |s_i|) Σ_i Σ_t
        total = sum(term(i, j) for i in rows for j in range(t) if mask[i][j])
        objective = total / sum(sum(mask[i]) for i in rows)
    else:  # (1/(G·C)) Σ_i Σ_t
        total = sum(term(i, j) for i in rows for j in range(t) if mask[i][j])
        objective = total / (len(rows) * norm)
    return -objective


def ref_metric_sums(lp, old, mask, ref=None, entropy=None):
    """Sums over action tokens of the unweighted metrics."""
    sums = dict(tokens=0.0, clipped_sum=0.0, ratio_sum=0.0, approx_kl_sum=0.0, kl_sum=0.0,
                entropy_sum=0.0)
    for i in range(len(mask)):
        for j in range(len(mask[0])):
            if not mask[i][j]:
                continue
            ratio = math.exp(lp[i][j] - old[i][j])
            sums["tokens"] += 1
            sums["ratio_sum"] += ratio
            sums["approx_kl_sum"] += (ratio - 1) - math.log(ratio)
            if ref is not None:
                sums["kl_sum"] += ref_k3(lp[i][j], ref[i][j])
            if entropy is not None:
                sums["entropy_sum"] += entropy[i][j]
    return sums


def ref_entropy(logits_row):
    m = max(logits_row)
    z = sum(math.exp(x - m) for x in logits_row)
    probs = [math.exp(x - m) / z for x in logits_row]
    return -sum(p * math.log(p) for p in probs if p > 0)


def ref_logprob(logits_row, target):
    m = max(logits_row)
    return logits_row[target] - (m + math.log(sum(math.exp(x - m) for x in logits_row)))


# ----------------------------------------------------------------------------- random inputs


def random_batch(seed, n=6, t=9, empty_rows=(1,)):
    """float32 arrays with random masks (some rows empty), advantages of both signs and ratios
    spread over [0.5, 1.7], inside and outside the clip range, kept 1e-3 away from its edges so
    that float32 and float64 agree on which tokens are clipped."""
    rng = np.random.default_rng(seed)
    mask = rng.random((n, t)) < 0.6
    mask[:, 0] = True  # every row non-empty except the chosen ones
    for i in empty_rows:
        mask[i] = False
    ratio = rng.uniform(0.5, 1.7, (n, t))
    for edge in (1 - EPS_LOW, 1 + EPS_HIGH):
        ratio = np.where(np.abs(ratio - edge) < 1e-3, edge + 2e-3, ratio)
    old = -rng.uniform(0.1, 4.0, (n, t))
    lp = old + np.log(ratio)
    adv = rng.normal(size=(n, t))
    ref = lp + rng.normal(scale=0.5, size=(n, t))
    entropy = rng.uniform(0.0, 3.0, (n, t))
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    return dict(mask=mask, lp=f32(lp), old=f32(old), adv=f32(adv), ref=f32(ref),
                entropy=f32(entropy))


def as_lists(b):
    """float64 nested lists of the float32 values the function under test receives."""
    return {k: np.asarray(v, bool if v.dtype == bool else np.float64).tolist()
            for k, v in b.items()}


def weights_of(mask, mode):
    return losses.aggregation_weights(mask, mode, NORM if mode == "seq-sum" else None)


def run_loss(b, weights, **kw):
    return losses.policy_loss(b["lp"], b["old"], b["adv"], weights, eps_low=EPS_LOW,
                              eps_high=EPS_HIGH, **kw)


# ----------------------------------------------------------------------------- aggregation


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("with_kl_and_entropy", [False, True])
def test_loss_matches_paper_objective(mode, seed, with_kl_and_entropy):
    b = random_batch(seed, empty_rows=(1, 4) if seed % 2 else (1,))
    r = as_lists(b)
    kw, ref_kw = {}, {}
    if with_kl_and_entropy:
        kw = dict(ref_logprobs=b["ref"], kl_coef=0.05, entropy=b["entropy"], entropy_coef=0.01)
        ref_kw = dict(ref=r["ref"], beta=0.05, entropy=r["entropy"], ent_coef=0.01)
    loss, metrics = run_loss(b, weights_of(b["mask"], mode), **kw)
    expected = ref_loss(mode, r["lp"], r["old"], r["adv"], r["mask"], **ref_kw)
    assert float(loss) == pytest.approx(expected, rel=1e-5, abs=1e-6)
    # The parts: pg_loss is the loss without the penalties.
    assert float(metrics["pg_loss"]) == pytest.approx(
        ref_loss(mode, r["lp"], r["old"], r["adv"], r["mask"]), rel=1e-5, abs=1e-6)
    if with_kl_and_entropy:
        only_kl = ref_loss(mode, r["lp"], r["lp"], [[0.0] * 9] * 6, r["mask"], ref=r["ref"], beta=1)
        only_ent = ref_loss(mode, r["lp"], r["lp"], [[0.0] * 9] * 6, r["mask"],
                            entropy=r["entropy"], ent_coef=1)
        assert float(metrics["kl_loss"]) == pytest.approx(only_kl, rel=1e-5)
        assert float(metrics["entropy_loss"]) == pytest.approx(-only_ent, rel=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.booleans(), min_size=5, max_size=5), min_size=1, max_size=6),
       st.sampled_from(AGGREGATIONS))
def test_weights_match_paper_normalisers(mask, mode):
    """w_{i,t} is the coefficient of ℓ_{i,t} in the paper objective, for any mask."""
    w = np.asarray(weights_of(np.array(mask), mode))
    assert w.dtype == np.float32
    rows = [i for i in range(len(mask)) if any(mask[i])]
    total = sum(sum(mask[i]) for i in rows)
    for i in range(len(mask)):
        for j in range(5):
            if not mask[i][j]:
                expected = 0.0
            elif mode == "seq-mean-token-mean":
                expected = 1 / len(rows) * 1 / sum(mask[i])
            elif mode == "token-mean":
                expected = 1 / total
            else:
                expected = 1 / (len(rows) * NORM)
            assert w[i, j] == pytest.approx(expected, rel=1e-6)


def test_hand_checked_aggregation():
    # Ratio 1 everywhere, so ℓ = A. Row 0 has action tokens A = 1, 3; row 1 one token A = -1;
    # row 2 is empty (padding) and must not count as a sequence.
    #   GRPO:     (1/2) * ((1 + 3)/2 + (-1)/1) = (2 - 1)/2 = 0.5    -> loss -0.5
    #             weights row 0: 1/(2*2) = 1/4 each, row 1: 1/(2*1) = 1/2
    #   DAPO:     (1 + 3 - 1)/3 = 1                                 -> loss -1
    #   Dr.GRPO:  C = 4: (1 + 3 - 1)/(2*4) = 3/8 = 0.375            -> loss -0.375
    mask = np.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], bool)
    adv = np.array([[1.0, 3.0, 9.0], [-1.0, 9.0, 9.0], [9.0, 9.0, 9.0]], np.float32)
    lp = np.full((3, 3), -1.0, np.float32)
    cases = [("seq-mean-token-mean", None, -0.5, [[0.25, 0.25, 0], [0.5, 0, 0], [0, 0, 0]]),
             ("token-mean", None, -1.0, [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0], [0, 0, 0]]),
             ("seq-sum", 4.0, -0.375, [[1 / 8, 1 / 8, 0], [1 / 8, 0, 0], [0, 0, 0]])]
    for mode, norm, expected_loss, expected_w in cases:
        w = losses.aggregation_weights(mask, mode, norm)
        np.testing.assert_allclose(w, expected_w, rtol=1e-6)
        loss, metrics = losses.policy_loss(lp, lp, adv, w, eps_low=0.2, eps_high=0.2)
        assert float(loss) == pytest.approx(expected_loss, rel=1e-6)
        assert float(metrics["tokens"]) == 3
        assert float(metrics["ratio_sum"]) == pytest.approx(3.0)
        assert float(metrics["approx_kl_sum"]) == 0.0


# ----------------------------------------------------------------------------- clipping


def test_clip_higher_hand_checked():
    # ε_low = 0.2, ε_high = 0.28, range [0.8, 1.28]:
    #   A = +1, ρ = 1.25: min(1.25, 1.25) = 1.25, not clipped      -> loss -1.25
    #   A = +1, ρ = 1.30: min(1.30, 1.28) = 1.28, clipped          -> loss -1.28
    #   A = -1, ρ = 0.79: min(-0.79, -0.80) = -0.80, clipped       -> loss 0.80
    #   A = -1, ρ = 0.81: min(-0.81, -0.81) = -0.81, not clipped   -> loss 0.81
    #   A = +1, ρ = 0.50: min(0.50, 0.80) = 0.50, not clipped      -> loss -0.50
    #   A = -1, ρ = 1.50: min(-1.50, -1.28) = -1.50, not clipped   -> loss 1.50
    # A symmetric ε = 0.28 would clip ρ = 0.79 only below 0.72: the asymmetry matters.
    ratio = np.array([1.25, 1.30, 0.79, 0.81, 0.50, 1.50])
    adv = np.array([[1, 1, -1, -1, 1, -1]], np.float32)
    old = np.full((1, 6), -2.0, np.float32)
    lp = (old + np.log(ratio)).astype(np.float32)
    loss, clipped = losses.clipped_surrogate(lp, old, adv, 0.2, 0.28)
    np.testing.assert_allclose(loss[0], [-1.25, -1.28, 0.80, 0.81, -0.50, 1.50], rtol=1e-5)
    assert clipped[0].tolist() == [False, True, True, False, False, False]
    assert clipped.dtype == jnp.bool_ and loss.dtype == jnp.float32

    # ∂/∂lp of w·(-ℓ): 0 where clipped, -w A ρ elsewhere.
    w = jnp.full((1, 6), 0.5)
    grad = jax.grad(lambda x: losses.policy_loss(x, old, adv, w, eps_low=0.2, eps_high=0.28)[0])(
        jnp.asarray(lp))
    expected = [0.0 if c else -0.5 * a * r for c, a, r in
                zip([False, True, True, False, False, False], adv[0], ratio)]
    np.testing.assert_allclose(grad[0], expected, rtol=1e-5, atol=0)
    assert grad[0, 1] == 0.0 and grad[0, 2] == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_surrogate_and_gradient_vs_reference(seed):
    b = random_batch(seed, empty_rows=())
    r = as_lists(b)
    loss, clipped = losses.clipped_surrogate(b["lp"], b["old"], b["adv"], EPS_LOW, EPS_HIGH)
    n, t = b["mask"].shape
    expected_clipped = np.zeros((n, t), bool)
    for i in range(n):
        for j in range(t):
            value, is_clipped = ref_token_objective(r["lp"][i][j], r["old"][i][j], r["adv"][i][j],
                                                    EPS_LOW, EPS_HIGH)
            assert float(loss[i, j]) == pytest.approx(-value, rel=1e-5, abs=1e-6)
            expected_clipped[i, j] = is_clipped
    np.testing.assert_array_equal(clipped, expected_clipped)
    assert 0 < expected_clipped.sum() < expected_clipped.size  # both kinds present

    w = weights_of(b["mask"], "token-mean")
    grad = np.asarray(jax.grad(lambda x: run_loss({**b, "lp": x}, w)[0])(jnp.asarray(b["lp"])))
    action = b["mask"]
    assert np.all(grad[expected_clipped | ~action] == 0.0)
    assert np.all(grad[~expected_clipped & action] != 0.0)
    # Elsewhere the gradient of -w ρ A with respect to log ρ is -w ρ A.
    ratio = np.exp(b["lp"].astype(np.float64) - b["old"])
    free = ~expected_clipped & action
    np.testing.assert_allclose(grad[free], (-np.asarray(w) * ratio * b["adv"])[free], rtol=1e-5)


# ----------------------------------------------------------------------------- KL and entropy


@pytest.mark.parametrize("seed", range(3))
def test_kl_k3_vs_reference_and_non_negative(seed):
    rng = np.random.default_rng(seed)
    lp = rng.normal(scale=3.0, size=(4, 11)).astype(np.float32)
    ref = (lp + rng.normal(scale=2.0, size=(4, 11))).astype(np.float32)
    ref[0, :3] = lp[0, :3]  # equal log-probs: exactly zero
    ref[1, :3] = lp[1, :3] + np.float32(1e-6)  # tiny differences stay non-negative
    kl = np.asarray(losses.kl_k3(lp, ref))
    assert kl.dtype == np.float32
    assert np.all(kl >= 0)
    assert np.all(kl[0, :3] == 0)
    for i in range(4):
        for j in range(11):
            expected = ref_k3(float(lp[i, j]), float(ref[i, j]))
            assert float(kl[i, j]) == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_kl_k3_small_differences_keep_precision():
    # k3 = e^x - x - 1 = x²/2 + x³/6 + O(x⁴) for x = log(π_ref/π_θ); computed as
    # exp(x) - x - 1 in float32 it would lose most digits to cancellation at |x| = 1e-3
    # (1 ulp of e^x ≈ 1e-7 against k3 ≈ 5e-7).
    x = np.array([1e-3, -1e-3, 3e-4, -2e-2], np.float64)
    lp = np.zeros((1, 4), np.float32)
    kl = np.asarray(losses.kl_k3(lp, x[None].astype(np.float32)))[0]
    expected = [math.exp(v) - v - 1 for v in x.astype(np.float32).astype(np.float64)]
    np.testing.assert_allclose(kl, expected, rtol=1e-3)


def test_kl_k3_is_unbiased():
    # Σ_x π(x) k3(x) = Σ π_ref - Σ π log(π_ref/π) - 1 = KL(π || π_ref) exactly.
    rng = np.random.default_rng(0)
    logits, ref_logits = rng.normal(size=(2, 7))
    vocab = np.arange(7)[None, :]
    lp = losses.token_logprobs(jnp.broadcast_to(logits, (1, 7, 7)), vocab)
    ref = losses.token_logprobs(jnp.broadcast_to(ref_logits, (1, 7, 7)), vocab)
    estimate = float((jnp.exp(lp) * losses.kl_k3(lp, ref)).sum())
    p = [math.exp(ref_logprob(list(logits), k)) for k in range(7)]
    q = [math.exp(ref_logprob(list(ref_logits), k)) for k in range(7)]
    assert estimate == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)), rel=1e-4)


def test_entropy_and_logprobs_vs_reference():
    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(3, 4, 13)) * rng.uniform(0.1, 5.0, (3, 4, 1))).astype(np.float32)
    targets = rng.integers(0, 13, (3, 4)).astype(np.int32)
    entropy = np.asarray(losses.token_entropy(logits))
    logprobs = np.asarray(losses.token_logprobs(logits, targets))
    assert entropy.shape == (3, 4) and logprobs.shape == (3, 4)
    assert entropy.dtype == np.float32 and logprobs.dtype == np.float32
    for i in range(3):
        for j in range(4):
            row = [float(x) for x in logits[i, j]]
            assert entropy[i, j] == pytest.approx(ref_entropy(row), rel=1e-5, abs=1e-6)
            assert logprobs[i, j] == pytest.approx(ref_logprob(row, targets[i, j]), rel=1e-5)


def test_entropy_extreme_logits():
    logits = jnp.array([[1000.0, 1000.0, -jnp.inf, 0.0],  # two equal winners: log 2
                        [0.0, -jnp.inf, -jnp.inf, -jnp.inf],  # one token: 0
                        [-1e4, -1e4, -1e4, -1e4]])  # uniform: log 4
    np.testing.assert_allclose(losses.token_entropy(logits), [math.log(2), 0.0, math.log(4)],
                               rtol=1e-6, atol=1e-6)
    grad = jax.grad(lambda x: losses.token_entropy(x).sum())(logits)
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(losses.token_logprobs(logits[None], jnp.array([[0, 0, 3]])),
                               [[-math.log(2), 0.0, -math.log(4)]], rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- micro-batches


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("splits", [(2, 5), (1, 2, 3, 4, 5), (3,)])
def test_micro_batches_add_up(mode, splits):
    b = random_batch(7, n=6, t=9, empty_rows=(2,))
    kw = dict(kl_coef=0.1, entropy_coef=0.02)
    weights = weights_of(b["mask"], mode)
    full_loss, full_metrics = run_loss(b, weights, ref_logprobs=b["ref"], entropy=b["entropy"],
                                       **kw)
    # The full-batch loss is itself the paper objective, so micro-batches are checked against it.
    r = as_lists(b)
    assert float(full_loss) == pytest.approx(ref_loss(
        mode, r["lp"], r["old"], r["adv"], r["mask"], ref=r["ref"], beta=0.1,
        entropy=r["entropy"], ent_coef=0.02), rel=1e-5)

    # every micro-batch padded to 8 rows (at least 2 of them) with garbage that must not count:
    # one shape, so the eager operations compile once for all micro-batches
    rows = 8
    total_loss, total_metrics = 0.0, {k: 0.0 for k in full_metrics}
    grad_total = 0.0
    edges = [0, *splits, 6]
    for a, z in zip(edges, edges[1:]):
        part = {k: v[a:z] for k, v in b.items()}
        w = np.asarray(weights)[a:z]
        pad = rows - (z - a)
        padded = {k: np.concatenate([v, np.full((pad, 9), 1e4 if v.dtype != bool else False,
                                                v.dtype)]) for k, v in part.items()}
        padded["old"][-pad:] = -1e4  # ρ = exp(2e4) on padding
        w_padded = np.concatenate([w, np.zeros((pad, 9), w.dtype)])
        loss, metrics = run_loss(padded, w_padded, ref_logprobs=padded["ref"],
                                 entropy=padded["entropy"], **kw)
        total_loss += loss
        total_metrics = {k: total_metrics[k] + metrics[k] for k in metrics}

        # A shared scalar parameter θ shifting every log-prob: accumulated gradients add up too.
        def loss_of(theta, part=padded, w=w_padded):
            return run_loss({**part, "lp": part["lp"] + theta}, w, ref_logprobs=part["ref"],
                            entropy=part["entropy"], **kw)[0]
        grad_total += jax.grad(loss_of)(0.0)

    assert float(total_loss) == pytest.approx(float(full_loss), rel=1e-5, abs=1e-7)
    for k in full_metrics:
        assert float(total_metrics[k]) == pytest.approx(float(full_metrics[k]), rel=1e-5,
                                                        abs=1e-6), k
    full_grad = jax.grad(lambda theta: run_loss(
        {**b, "lp": b["lp"] + theta}, weights, ref_logprobs=b["ref"], entropy=b["entropy"],
        **kw)[0])(0.0)
    assert np.isfinite(float(grad_total))
    assert float(grad_total) == pytest.approx(float(full_grad), rel=1e-5, abs=1e-7)

    # Padding rows do not change the weights of the real rows either.
    padded_mask = np.concatenate([b["mask"], np.zeros((3, 9), bool)])
    np.testing.assert_array_equal(weights_of(padded_mask, mode)[:6], weights)


def test_metrics_vs_reference_and_summary():
    b = random_batch(3)
    r = as_lists(b)
    weights = weights_of(b["mask"], "seq-mean-token-mean")
    _, metrics = run_loss(b, weights, ref_logprobs=b["ref"], entropy=b["entropy"])
    expected = ref_metric_sums(r["lp"], r["old"], r["mask"], r["ref"], r["entropy"])
    clipped = sum(ref_token_objective(r["lp"][i][j], r["old"][i][j], r["adv"][i][j], EPS_LOW,
                                      EPS_HIGH)[1]
                  for i in range(6) for j in range(9) if r["mask"][i][j])
    expected["clipped_sum"] = clipped
    for k, v in expected.items():
        assert float(metrics[k]) == pytest.approx(v, rel=1e-5, abs=1e-6), k

    summary = losses.summarize_loss_metrics(metrics)
    n = expected["tokens"]
    assert float(summary["clip_fraction"]) == pytest.approx(clipped / n, rel=1e-6)
    assert float(summary["ratio_mean"]) == pytest.approx(expected["ratio_sum"] / n, rel=1e-5)
    assert float(summary["approx_kl"]) == pytest.approx(expected["approx_kl_sum"] / n, rel=1e-5)
    assert float(summary["kl"]) == pytest.approx(expected["kl_sum"] / n, rel=1e-5)
    assert float(summary["entropy"]) == pytest.approx(expected["entropy_sum"] / n, rel=1e-5)
    for k in ("pg_loss", "kl_loss", "entropy_loss"):
        assert float(summary[k]) == float(metrics[k])


def test_without_reference_and_entropy_terms_are_zero():
    b = random_batch(5)
    weights = weights_of(b["mask"], "token-mean")
    loss, metrics = run_loss(b, weights, kl_coef=0.3, entropy_coef=0.3)
    assert float(loss) == float(metrics["pg_loss"])
    for k in ("kl_loss", "entropy_loss", "kl_sum", "entropy_sum"):
        assert float(metrics[k]) == 0.0


# ----------------------------------------------------------------------------- edge cases


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_empty_mask_is_safe(mode):
    mask = np.zeros((3, 4), bool)
    w = weights_of(mask, mode)
    assert np.all(np.asarray(w) == 0)
    lp = jnp.zeros((3, 4))
    old = jnp.full((3, 4), -1e4)  # would overflow the ratio if it reached the loss
    ref = jnp.full((3, 4), jnp.inf)
    adv = jnp.ones((3, 4))

    def loss_fn(x):
        return losses.policy_loss(x, old, adv, w, eps_low=0.2, eps_high=0.28, ref_logprobs=ref,
                                  kl_coef=0.1, entropy=jnp.full((3, 4), jnp.nan),
                                  entropy_coef=0.1)

    (loss, metrics), grad = jax.value_and_grad(loss_fn, has_aux=True)(lp)
    assert float(loss) == 0.0
    assert np.all(np.asarray(grad) == 0.0)
    summary = losses.summarize_loss_metrics(metrics)
    for k, v in {**metrics, **summary}.items():
        assert float(v) == 0.0, k


def test_errors():
    mask = np.ones((2, 3), bool)
    with pytest.raises(ValueError) as info:
        losses.aggregation_weights(mask, "seq-mean")
    for mode in AGGREGATIONS:
        assert mode in str(info.value)
    with pytest.raises(ValueError, match="norm_constant"):
        losses.aggregation_weights(mask, "seq-sum")
    for bad in (0, -3.0, np.float32(0)):
        with pytest.raises(ValueError, match="norm_constant > 0"):
            losses.aggregation_weights(mask, "seq-sum", bad)
    with pytest.raises(ValueError, match=r"\[N, T\]"):
        losses.aggregation_weights(np.ones(3, bool), "token-mean")


def test_jit_matches_eager():
    b = random_batch(11)
    for mode in AGGREGATIONS:
        norm = jnp.float32(NORM) if mode == "seq-sum" else None  # a traced constant works too
        w_jit = jax.jit(losses.aggregation_weights, static_argnums=1)(b["mask"], mode, norm)
        np.testing.assert_allclose(w_jit, weights_of(b["mask"], mode), rtol=1e-6)
    w = weights_of(b["mask"], "seq-mean-token-mean")

    @jax.jit
    def step(lp, old, adv, w, ref, entropy):
        return losses.policy_loss(lp, old, adv, w, eps_low=EPS_LOW, eps_high=EPS_HIGH,
                                  ref_logprobs=ref, kl_coef=0.1, entropy=entropy,
                                  entropy_coef=0.01)

    loss, metrics = step(b["lp"], b["old"], b["adv"], w, b["ref"], b["entropy"])
    eager_loss, eager_metrics = run_loss(b, w, ref_logprobs=b["ref"], kl_coef=0.1,
                                         entropy=b["entropy"], entropy_coef=0.01)
    assert float(loss) == pytest.approx(float(eager_loss), rel=1e-6)
    for k in metrics:
        assert float(metrics[k]) == pytest.approx(float(eager_metrics[k]), rel=1e-6, abs=1e-7)
