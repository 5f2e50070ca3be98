"""The bounded branch and prune logs (`state.Events`): every event is counted, the first E of each
group and kind are logged (E = LatrConfig.max_events), so trees can be inspected and plotted
without anything growing per token. Writes past E are dropped by the scatter.

Shapes: P groups of k slots, R = P·k rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.sampling.latr.branch import Births
from jaxtree.sampling.latr.state import Events


def _log(buffer: jax.Array, target: jax.Array, values: jax.Array) -> jax.Array:
    """buffer[g, target[g, i]] = values[g, i] ([P, E] buffer, [P, k] targets and values); a
    target of E (or more) is dropped."""
    groups, k = target.shape
    group_ids = jnp.repeat(jnp.arange(groups)[:, None], k, axis=1)
    return buffer.at[group_ids, target].set(values, mode="drop")


def log_branches(events: Events, births: Births, step: jax.Array) -> Events:
    """Appends this step's births in allocation order (`births.ok` is a prefix of each group's k
    entries, so entry i goes to position num_branches + i)."""
    groups, k = births.ok.shape
    max_events = events.branch_step.shape[1]
    target = jnp.where(births.ok, events.num_branches[:, None] + jnp.arange(k)[None, :],
                       max_events)
    return events._replace(
        num_branches=events.num_branches + births.ok.sum(axis=1).astype(jnp.int32),
        branch_step=_log(events.branch_step, target, jnp.full((groups, k), step, jnp.int32)),
        branch_parent=_log(events.branch_parent, target, births.parent),
        branch_slot=_log(events.branch_slot, target, births.slot),
        branch_token=_log(events.branch_token, target, births.token))


def log_prunes(events: Events, pruned: jax.Array, slot: jax.Array, window: jax.Array,
               distance: jax.Array, step: jax.Array) -> Events:
    """Appends this step's direct prunes in slot order.

    pruned: bool[P, k]; slot, window: int32[P, k]; distance: float32[P, k] (from
    `prune.lookahead_prunes`, by group).
    """
    max_events = events.prune_step.shape[1]
    rank = jnp.cumsum(pruned, axis=1) - 1 + events.num_prunes[:, None]
    target = jnp.where(pruned & (rank < max_events), rank, max_events)
    return events._replace(
        num_prunes=events.num_prunes + pruned.sum(axis=1).astype(jnp.int32),
        prune_step=_log(events.prune_step, target, jnp.full(pruned.shape, step, jnp.int32)),
        prune_slot=_log(events.prune_slot, target, slot),
        prune_window=_log(events.prune_window, target, window),
        prune_distance=_log(events.prune_distance, target, distance))
