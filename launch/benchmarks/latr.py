"""LATR rollouts vs plain sampling: wall time and slot-token forwards, in the same run.

Three ways to produce k rollouts for each of P prompts, n tokens each:

  plain     `jaxtree.sampling.generate` (one jitted prefill + while loop, P·k rows)
  latr      `jaxtree.sampling.latr` (the whole tree on device, one jitted loop)
  python    the same tree decisions with per-row Python bookkeeping shaped like LATR's reference
            code: one batched forward per step on device, then the top probabilities pulled to
            the host, branching and pruning decided in Python loops over rows (edit distance per
            pair on the CPU), and cache rows for new branches copied by re-gathering the whole
            cache. (The reference code also re-prefills every partial sequence in vLLM afterwards;
            that cost is not included, so this anchor is optimistic.)

The model is the tiny architecture with an untied output layer scaled up 16x: random weights give
near-uniform distributions that never branch at LATR's thresholds, and the scaled layer makes a
few percent of positions pass them (6.6% of random contexts). Along the trees' greedy paths about
1% of tokens branch (LATR Table 10 reports 4-10% for Qwen2.5-3B), so trees rarely saturate: the
kernel's worst case, tree bookkeeping at every step. EOS is disabled so every row runs n tokens and
the three variants do the same amount of decoding. Slot-token forwards count the tokens fed to
the model for rows that are alive and unfinished (prefill excluded): plain sampling feeds n - 1
per row; LATR feeds its tree branches and the fresh samples its free slots hold (a later branch may
discard one), and with its default 'fresh' completion never more than plain sampling. Repeats of
the two are interleaved (plain, LATR, plain, ...) so a drift in the machine's speed hits both.
"""

from __future__ import annotations

import time

import editdistance
import jax
import jax.numpy as jnp
import numpy as np

from jaxtree import models
from jaxtree.models.kv_cache import init_cache
from jaxtree.models.transformer import Transformer
from jaxtree.sampling.latr import LatrConfig, latr_generate_jit
from jaxtree.sampling.latr.branch import num_candidates
from jaxtree.sampling.logits_processing import SamplingConfig, sample_tokens
from jaxtree.sampling.sampler import generate_jit
from jaxtree.utils import print_table
from launch.benchmarks.common import interleaved_median_seconds, machine_info, median_seconds, write_json

PROMPT_LEN = 16
NO_EOS = jnp.zeros((0,), jnp.int32)


def peaky_tiny(scale: float = 16.0):
    config = models.get_preset("tiny").replace(tie_word_embeddings=False)
    params = models.init_params(config, jax.random.key(0))
    return config, dict(params, lm_head={"kernel": params["lm_head"]["kernel"] * scale})


def _prompts(groups: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (groups, PROMPT_LEN)).astype(np.int32)


def run_plain(config, params, prompts, k: int, n: int, sampling: SamplingConfig):
    rows = np.repeat(prompts, k, axis=0)
    out = generate_jit(config, sampling, n, 256, PROMPT_LEN + n, params, jnp.asarray(rows),
                       jnp.full((rows.shape[0],), PROMPT_LEN, jnp.int32), jax.random.key(1),
                       jnp.full((rows.shape[0],), n, jnp.int32),
                       jnp.full((rows.shape[0], 1, 1), -1, jnp.int32), NO_EOS)
    jax.block_until_ready(out.tokens)
    return out


def run_latr(config, params, prompts, latr: LatrConfig, k: int, n: int,
             sampling: SamplingConfig):
    groups = prompts.shape[0]
    out = latr_generate_jit(config, latr, sampling, k, n, 256, params, jnp.asarray(prompts),
                            jnp.full((groups,), PROMPT_LEN, jnp.int32),
                            jnp.arange(groups, dtype=jnp.int32), jnp.int32(k),
                            jax.random.key(1), NO_EOS)
    jax.block_until_ready(out.tokens)
    return out


def run_python(config, params, prompts, latr: LatrConfig, k: int, n: int,
               sampling: SamplingConfig):
    """The per-row Python variant (see the module docstring). Returns slot-token forwards."""
    groups = prompts.shape[0]
    rows = groups * k
    model = Transformer(config)
    step_fn = jax.jit(lambda p, t, c, f: model.apply({"params": p}, t[:, None], c, f,
                                                     last_only=True))
    # c* and the tokens besides it that can pass Eq. 5 (the kernel's candidate count)
    count = 1 + num_candidates(latr.tau_abs, k)
    top = jax.jit(lambda logits: jax.lax.top_k(jax.nn.softmax(logits, axis=-1), count))
    sample = jax.jit(lambda u, logits: sample_tokens(u, logits, sampling)[0])
    gather_cache = jax.jit(lambda cache, index: jax.tree_util.tree_map(lambda x: x[index],
                                                                        cache))
    cache = init_cache(config, rows, PROMPT_LEN + n)
    logits, cache = model.apply({"params": params}, jnp.asarray(np.repeat(prompts, k, axis=0)),
                                cache, jnp.full((rows,), PROMPT_LEN, jnp.int32), last_only=True)
    # per-row Python tree state
    alive = [[j == 0 for j in range(k)] for _ in range(groups)]
    parent = [[-1] * k for _ in range(groups)]
    birth = [[-1] * k for _ in range(groups)]
    tokens = [[[] for _ in range(k)] for _ in range(groups)]
    saturated = [False] * groups
    r_max = max(latr.windows)
    forwards = 0
    rng = np.random.default_rng(1)
    for l in range(n):
        probs, tops = jax.device_get(top(logits))
        sampled = np.asarray(jax.device_get(sample(jnp.asarray(rng.random(rows), jnp.float32),
                                                   logits)))
        step_tokens = np.zeros(rows, np.int32)
        copies = list(range(rows))
        for g in range(groups):
            candidates = []
            for j in range(k):
                if not alive[g][j]:
                    continue
                row = g * k + j
                if saturated[g]:
                    step_tokens[row] = sampled[row]
                else:
                    step_tokens[row] = tops[row, 0]
                    for c in range(1, count):
                        if probs[row, c] > latr.tau_abs and \
                                probs[row, 0] - probs[row, c] < latr.tau_rel:
                            candidates.append((-probs[row, c], j, c))
                tokens[g][j].append(int(step_tokens[row]))
            candidates.sort()
            free = [j for j in range(k) if not alive[g][j]]
            for (_, j, c), dst in zip(candidates, free):
                alive[g][dst], parent[g][dst], birth[g][dst] = True, j, l
                tokens[g][dst] = tokens[g][j][:l] + [int(tops[g * k + j, c])]
                step_tokens[g * k + dst] = tops[g * k + j, c]
                copies[g * k + dst] = g * k + j
            for r in latr.windows:
                for j in range(k):
                    if alive[g][j] and parent[g][j] >= 0 and birth[g][j] == l - r:
                        a = tokens[g][j][birth[g][j] + 1:]
                        b = tokens[g][parent[g][j]][birth[g][j] + 1:l + 1]
                        if editdistance.eval(a, b) / max(len(a), len(b), 1) < latr.tau_ed:
                            doomed = {j}
                            for _ in range(k):
                                doomed |= {x for x in range(k)
                                           if alive[g][x] and parent[g][x] in doomed}
                            for x in doomed:
                                alive[g][x], parent[g][x] = False, -1
            if not saturated[g] and sum(alive[g]) == k and not any(
                    alive[g][j] and parent[g][j] >= 0 and birth[g][j] > l - r_max
                    for j in range(k)):
                saturated[g] = True
        if copies != list(range(rows)):
            cache = gather_cache(cache, jnp.asarray(copies, jnp.int32))
        feed = np.array([alive[r // k][r % k] for r in range(rows)], np.int32)
        forwards += int(feed.sum())
        logits, cache = step_fn(params, jnp.asarray(step_tokens), cache, jnp.asarray(feed))
    jax.block_until_ready(logits)
    return forwards - sum(sum(a) for a in alive)  # the last step's feed is not needed


def run(lengths, prompt_counts, k: int, repeats: int, output: str, with_python: bool = True):
    config, params = peaky_tiny()
    sampling = SamplingConfig(temperature=1.0)
    latr = LatrConfig()
    results, table = [], []
    for n in lengths:
        for groups in prompt_counts:
            prompts = _prompts(groups)
            timed = interleaved_median_seconds(
                {"plain": lambda: run_plain(config, params, prompts, k, n, sampling),
                 "latr": lambda: run_latr(config, params, prompts, latr, k, n, sampling)},
                repeats)
            (plain_s, plain_t), (latr_s, latr_t) = timed["plain"], timed["latr"]
            out = jax.device_get(run_latr(config, params, prompts, latr, k, n, sampling))
            plain_forwards = groups * k * (n - 1)
            latr_forwards = int(out.forwards.sum())
            row = {"max_new_tokens": n, "prompts": groups, "k": k,
                   "plain_seconds": plain_s, "plain_times": plain_t,
                   "latr_seconds": latr_s, "latr_times": latr_t,
                   "latr_over_plain": latr_s / plain_s,
                   "plain_forwards": plain_forwards, "latr_forwards": latr_forwards,
                   "saturation_length": float(out.tree_end_step.mean()),
                   "branching_ratio": float(out.num_branches.sum() / out.mask.sum()),
                   "completed_rows": int((out.origin >= 2).sum()),
                   "forked_rows": int((out.fork_position >= 0).sum())}
            python_cell = "-"
            if with_python:
                start = time.perf_counter()
                run_python(config, params, prompts, latr, k, n, sampling)  # compile
                compile_and_run = time.perf_counter() - start
                python_s, python_t = median_seconds(
                    lambda: run_python(config, params, prompts, latr, k, n, sampling), repeats,
                    warmup=0)
                row.update(python_seconds=python_s, python_times=python_t,
                           python_first_call_seconds=compile_and_run,
                           python_over_plain=python_s / plain_s)
                python_cell = f"{python_s:.2f} ({python_s / plain_s:.2f}x)"
            results.append(row)
            table.append([n, groups, f"{plain_s:.2f}", f"{latr_s:.2f}",
                          f"{latr_s / plain_s:.2f}x", python_cell, f"{plain_forwards:,}",
                          f"{latr_forwards:,}", f"{row['saturation_length']:.0f}",
                          f"{row['branching_ratio']:.3f}",
                          f"{row['completed_rows']} ({row['forked_rows']})"])
            print(f"  n={n} prompts={groups}: done", flush=True)
    print(f"\nLATR (k={k}, τ_abs {latr.tau_abs}, τ_rel {latr.tau_rel}, τ_ed {latr.tau_ed}, "
          f"windows {latr.windows}) vs plain sampling; median of {repeats}")
    print_table(["tokens", "prompts", "plain s", "LATR s", "LATR / plain",
                 "Python bookkeeping s", "plain forwards", "LATR forwards", "saturation",
                 "branching ratio", "fresh rows (forked)"], table)
    write_json(output, {"benchmark": "latr", "machine": machine_info(), "results": results})
