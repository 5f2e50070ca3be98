"""The LATR kernel: prefill, the tree loop composing one step from the parts, the plain phase.

One step l (see the package docstring): extend -> branch -> write -> prune -> complete -> log ->
saturate -> forward. Shapes: P groups of k slots, R = P·k rows, n = max_new_tokens.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import init_cache
from jaxtree.models.lora import model_variables
from jaxtree.models.transformer import Transformer
from jaxtree.sampling import randomness
from jaxtree.sampling.latr.branch import (branch_candidates, num_candidates, spawn_children,
                                          top_tokens)
from jaxtree.sampling.latr.completion import continue_freed_slots, restart_freed_slots
from jaxtree.sampling.latr.config import COPY_CHUNK, NO_PARENT, NOT_BORN, LatrConfig
from jaxtree.sampling.latr.events import log_branches, log_prunes
from jaxtree.sampling.latr.output import LatrOutput, assemble_output
from jaxtree.sampling.latr.plain_phase import finish_plainly
from jaxtree.sampling.latr.prune import extend_frontier, lookahead_prunes, with_descendants
from jaxtree.sampling.latr.rows import write_step
from jaxtree.sampling.latr.state import RowLayout, TreeState, initial_state, row_layout
from jaxtree.sampling.logits_processing import SamplingConfig, sample_tokens


def latr_generate(model_config: ModelConfig, latr: LatrConfig, sampling: SamplingConfig, k: int,
                  max_new_tokens: int, pad_id: int, params, prompt_tokens: jax.Array,
                  prompt_lengths: jax.Array, group_ids: jax.Array, num_tree_slots: jax.Array,
                  rng: jax.Array, eos_ids: jax.Array) -> LatrOutput:
    """Generates k rollouts for each of P prompts with LATR (see the package docstring).

    Args:
      model_config, latr, sampling: static configs (the model, LATR's thresholds, the sampling
        of the stochastic phase).
      k: static, the group size: rollouts (slots) per prompt.
      max_new_tokens (n), pad_id: static.
      params: model parameters.
      prompt_tokens: int32[P, L] right-padded prompts; prompt_lengths: int32[P] (>= 1).
      group_ids: int32[P], a global id per group: row (g, s) samples with the key
        fold_in(fold_in(rng, group_ids[g]), s) (`randomness.row_keys`), so results do not depend
        on how groups are batched or sharded.
      num_tree_slots: int32[], k_tree in [0, k] (hybrid rollout; k = pure LATR); traced, so
        annealing it never recompiles.
      rng: a PRNG key.
      eos_ids: int32[E].

    Returns:
      LatrOutput with [P, k, ...] rows and [P, ...] per-group statistics.
    """
    if k < 1:
        raise ValueError(f"k={k} must be positive")
    n = max_new_tokens
    groups, prompt_width = prompt_tokens.shape
    layout = row_layout(groups, k, num_tree_slots)
    keys = randomness.row_keys(rng, jnp.repeat(group_ids, k), layout.slot)
    # a restarted sample may run past step n, up to 2n ('restart' completion)
    uniforms = randomness.step_uniforms(keys, 2 * n)                           # [R, 2n]

    # Prefill each prompt once, then give every slot a copy of its group's prompt cache.
    model = Transformer(model_config)
    prompt_cache = init_cache(model_config, groups, prompt_width + n)
    prompt_logits, prompt_cache = model.apply(model_variables(params), prompt_tokens, prompt_cache,
                                              prompt_lengths, last_only=True)
    cache = jax.tree_util.tree_map(lambda x: jnp.repeat(x, k, axis=0), prompt_cache)
    root_logits = jnp.repeat(prompt_logits, k, axis=0)                        # [R, V]
    s0 = initial_state(latr, layout, n, pad_id, cache, root_logits, num_tree_slots)

    step = functools.partial(
        _tree_step, model, latr, sampling, n, pad_id, params, layout, num_tree_slots,
        jnp.repeat(prompt_lengths, k), root_logits, uniforms, eos_ids, min(layout.rows,
                                                                              COPY_CHUNK))

    def tree_phase(s: TreeState):
        running = (s.alive | s.shadow) & ~s.finished
        return (s.step < n) & jnp.any(running) & ~jnp.all(s.saturated)

    s = jax.lax.while_loop(tree_phase, step, s0)
    s = finish_plainly(model_config, sampling, n, pad_id, params, layout, s, uniforms, eos_ids)
    return assemble_output(latr, layout, s, n, pad_id, eos_ids)


def _tree_step(model: Transformer, latr: LatrConfig, sampling: SamplingConfig, n: int,
               pad_id: int, params, layout: RowLayout, num_tree_slots: jax.Array,
               prompt_lengths: jax.Array, root_logits: jax.Array, uniforms: jax.Array,
               eos_ids: jax.Array, copy_chunk: int, s: TreeState) -> TreeState:
    """One step l = s.step of the tree loop for every group at once.

    prompt_lengths: int32[R] (each row's prompt); root_logits: float32[R, V] (after the prompt);
    uniforms: float32[R, 2n] (column l is this step's draw).
    """
    l = s.step
    plain = layout.plain
    by_group = layout.by_group
    r_max = latr.max_window

    # extend: argmax in tree mode, sampling otherwise (plain rows, saturated groups, fresh
    # samples); every row's probabilities come from one log-softmax (one normalisation pass)
    active = s.alive & ~s.finished
    shadow_running = s.shadow & ~s.finished
    logp_all = jax.nn.log_softmax(s.logits, axis=-1)
    probs = jnp.exp(logp_all)
    tree_mode = active & ~plain & ~s.saturated[layout.group]
    sampled, _, _ = sample_tokens(uniforms[:, l], s.logits, sampling)
    top_p, top_tok = top_tokens(probs, 1 + num_candidates(latr.tau_abs, layout.k))
    token = jnp.where(tree_mode, top_tok[:, 0], sampled)
    token = jnp.where(active | shadow_running, token, pad_id)
    token_logp = jnp.take_along_axis(logp_all, token[:, None], axis=1)[:, 0]

    # branch: children are born into free tree slots as copies of their parents
    candidates = branch_candidates(latr, top_p, top_tok, tree_mode)
    s, births, token, token_logp = spawn_children(layout, s, candidates, token, token_logp,
                                                  copy_chunk)
    born = births.born
    events = log_branches(s.events, births, l)

    # write this step's tokens; a slot finishes on EOS or at the last position. Tree and plain
    # rows write position l; a fresh sample writes at its own length (a restarted one is behind)
    writing = ((s.alive | s.shadow) & ~s.finished) | born
    pos = jnp.where(s.shadow, s.lengths, l)
    tokens, logprobs, lengths, ends = write_step(s.tokens, s.logprobs, s.lengths, pos, writing,
                                                 token, token_logp, eos_ids, n)
    # a child born into a finished fresh sample's slot starts unfinished
    finished = jnp.where(born, ends, s.finished | ends)
    s = s._replace(tokens=tokens, logprobs=logprobs, lengths=lengths, finished=finished)

    # prune children whose lookahead window ends now, with their descendants; a group whose
    # tree phase is over is frozen (no check comes due after normal saturation, but one can
    # after every branch finished: running it would make the tree depend on how long the other
    # groups of the batch keep the loop going)
    is_child = s.alive & (s.parent >= 0) & ~plain & ~s.saturated[layout.group]
    parent_row = layout.base + jnp.maximum(s.parent, 0)
    looking = is_child & (s.birth < l) & (l <= s.birth + r_max)
    frontier = extend_frontier(s.frontier, l, tokens, born, looking, writing, parent_row,
                               s.birth, r_max)
    direct, prune_window, prune_distance = lookahead_prunes(latr, frontier, l, is_child, s.birth)
    removed = with_descendants(direct, parent_row, is_child, layout.k)
    s = s._replace(alive=s.alive & ~removed, frontier=frontier)
    events = log_prunes(events, by_group(direct), by_group(layout.slot), by_group(prune_window),
                        by_group(prune_distance), l)

    # completion of the freed slots
    restart = jnp.zeros_like(removed)
    if latr.completion == "fresh":
        s, token = continue_freed_slots(layout, s, removed, writing & ~ends & ~removed, token,
                                        copy_chunk)
    elif latr.completion == "restart":
        restart = removed
        s = restart_freed_slots(s, removed, pad_id, prompt_lengths)

    # saturation: k_tree alive tree slots, none younger than the largest window (§3.3)
    tree_alive = by_group(s.alive & ~plain)
    young = by_group(s.alive & (s.parent >= 0) & (s.birth > l - r_max) & ~plain)
    now_saturated = ~s.saturated & (tree_alive.sum(axis=1) >= num_tree_slots) & \
        ~young.any(axis=1)
    # a group whose tree branches have all finished ends its tree phase too (Alg. 1 has nothing
    # left to extend); it saturates so that nothing of its tree changes afterwards
    tree_running = by_group(s.alive & ~plain & ~s.finished).any(axis=1)
    now_saturated = now_saturated | (~s.saturated & ~tree_running)
    tree_end = jnp.where(now_saturated, l + 1, s.tree_end)

    # forward this step's tokens (children and forks included; removed, restarted and finished
    # rows idle)
    feed = (s.alive | s.shadow) & ~s.finished & ~restart
    new_logits, cache = model.apply(model_variables(params), token[:, None], s.cache,
                                    feed.astype(jnp.int32), last_only=True)
    new_logits = jnp.where(feed[:, None], new_logits, s.logits)
    return s._replace(
        step=l + 1, cache=cache,
        logits=jnp.where(restart[:, None], root_logits, new_logits),
        parent=jnp.where(s.alive, s.parent, NO_PARENT),
        birth=jnp.where(s.alive, s.birth, NOT_BORN),
        saturated=s.saturated | now_saturated, tree_end=tree_end,
        forwards=s.forwards + by_group(feed).sum(axis=1).astype(jnp.int32),
        events=events)


_STATIC = ("model_config", "latr", "sampling", "k", "max_new_tokens", "pad_id")
latr_generate_jit = jax.jit(latr_generate, static_argnames=_STATIC)


def latr_generate_sharded(mesh, model_config: ModelConfig, latr: LatrConfig,
                          sampling: SamplingConfig, k: int, max_new_tokens: int, pad_id: int,
                          params, prompt_tokens: jax.Array, prompt_lengths: jax.Array,
                          group_ids: jax.Array, num_tree_slots: jax.Array, rng: jax.Array,
                          eos_ids: jax.Array) -> LatrOutput:
    """`latr_generate` under `jax.shard_map`: each device of the mesh's batch axes (data x fsdp)
    owns whole prompt groups (P must divide evenly) and runs the kernel on them with replicated
    parameters. Trees never span devices, so there is no communication; rows sample with keys
    derived from the global `group_ids`, so the result equals the single-device one."""
    from jax.sharding import PartitionSpec as P

    from jaxtree.parallel.mesh import BATCH_AXES

    groups = P(BATCH_AXES)
    kernel = functools.partial(latr_generate, model_config, latr, sampling, k, max_new_tokens,
                               pad_id)
    out_specs = LatrOutput(*([groups] * len(LatrOutput._fields)))
    sharded = jax.shard_map(kernel, mesh=mesh,
                            in_specs=(P(), groups, groups, groups, P(), P(), P()),
                            out_specs=out_specs, check_vma=False)
    return jax.jit(sharded)(params, prompt_tokens, prompt_lengths, group_ids, num_tree_slots,
                            rng, eos_ids)
