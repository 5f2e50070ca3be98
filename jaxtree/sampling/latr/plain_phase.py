"""After the tree phase: plain sampling of every running row by the sampler's own decode loop.

Once every group's tree phase is over (or the n steps are spent), the rows still running
(saturated tree rows, plain rows, fresh samples) need no tree bookkeeping: they are continued by
`sampler.decode_with_uniforms`, each from its own position, with a budget of the positions it has
left. Row r's draw at the j-th step after the tree loop's last step l0 is the pre-drawn
uniforms[r, l0 + j], the column the tree loop would have used at step l0 + j, so a row's
tokens do not depend on which loop produced them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.sampling.latr.rows import write_at_offsets
from jaxtree.sampling.latr.state import RowLayout, TreeState
from jaxtree.sampling.logits_processing import SamplingConfig
from jaxtree.sampling.sampler import decode_with_uniforms


def finish_plainly(model_config: ModelConfig, sampling: SamplingConfig, n: int, pad_id: int,
                   params, layout: RowLayout, s: TreeState, uniforms: jax.Array,
                   eos_ids: jax.Array) -> TreeState:
    """Samples every running row (alive or shadow, unfinished) to its end (EOS or n tokens).

    uniforms: float32[R, 2n], the kernel's pre-drawn draws (step l uses column l). Returns the
    state with the rows' tokens, log-probs and lengths complete, `step` advanced by the steps run
    and `forwards` counting the tokens fed (a row's last token is generated but not needed, so a
    row that generates m tokens here feeds m - 1, as in the tree loop). The cache and logits are
    left as they were: nothing reads them afterwards.
    """
    rows = layout.rows
    running = (s.alive | s.shadow) & ~s.finished
    # a running row's cache holds its prompt and its tokens (it is fed every step while it runs),
    # and its logits are the prediction after its last token: decode continues it from there
    budgets = jnp.where(running, n - s.lengths, 0)
    # every row needs at most n more tokens, and l0 <= n: columns l0 .. l0 + n - 1 < 2n
    later = jax.lax.dynamic_slice_in_dim(uniforms, s.step, n, axis=1)
    no_stops = jnp.full((rows, 1, 1), -1, jnp.int32)
    _, out = decode_with_uniforms(model_config, sampling, n, pad_id, params, s.cache, s.logits,
                                  later, budgets, no_stops, eos_ids)
    generated = out.num_generated
    fed = jnp.maximum(generated - 1, 0)
    return s._replace(
        step=s.step + out.num_steps,
        tokens=write_at_offsets(s.tokens, out.tokens, s.lengths, generated),
        logprobs=write_at_offsets(s.logprobs, out.policy_logprobs, s.lengths, generated),
        lengths=s.lengths + generated,
        finished=s.finished | running,
        forwards=s.forwards + layout.by_group(fed).sum(axis=1).astype(jnp.int32))
