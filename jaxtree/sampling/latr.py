"""LATR: lookahead tree-based rollouts (LATR paper, Alg. 1, §3), as one jitted loop on device.

P prompt groups of k slots each (R = P·k rows). The whole tree lives in fixed-size arrays: per slot
an alive flag, its parent slot, its birth step, its token and log-prob rows and its KV-cache row.
All alive slots generate in lockstep, so generation step l is also every slot's token position.

One step l, for every group at once:

  forward   the previous step's tokens of all R rows in one batched call (the logits for step l
            were produced by the previous step's forward; step 0's by the prompt prefill)
  extend    tree slots take the argmax token c*; plain slots (hybrid rollout) and every slot of a
            saturated group sample with the sampling config (temperature, top-p)
  branch    a candidate c != c* of tree slot s spawns a child when p(c) > τ_abs and
            p(c*) - p(c) < τ_rel (softmax of the raw logits, Eq. 5). A group's candidates are
            ranked by descending p(c) (ties: lower slot, then higher-ranked candidate) and take the
            group's free tree slots in ascending order until the group's k_tree tree slots are
            alive. The child copies its parent's cache row, token row and log-prob row on device
            (the shared prefix is never recomputed) and gets c at position l.
  prune     a child born at step b is checked at steps b + r for each lookahead window r (default
            20, 30, 50; Alg. 1 line 23): its r tokens after the branch token (positions b+1..b+r)
            against its parent's tokens at the same positions, by normalized Levenshtein distance
            on device. Under τ_ed, the child and all its descendants are removed and their slots
            freed (Eq. 7-8). Being kept needs every window to pass (App. B.3).
  saturate  once a group has k_tree alive tree slots and no alive child younger than the largest
            window, its tree phase ends (§3.3 early stopping) and all its slots sample
            stochastically from step l + 1 on.

EOS inside a lookahead window: a sequence's window holds its tokens up to and including its EOS
and nothing after, so a branch that ended early is compared on what it has (normalized by the
longer of the two windows); a child and parent that both ended on their branch tokens differ by
exactly that token and count as distinct (distance 1). A slot that finished stays alive (a complete
rollout) and stops costing forward work.

Completion: a group whose tree ends with fewer than k_tree alive tree slots (pruning freed slots
that no later branch refilled) is completed in one of three ways (`LatrConfig.completion`):

  fresh      (default) stochastic samples from the prompt, within plain sampling's budget of n
             steps for k rows. They are computed speculatively: a free tree slot samples from the
             prompt from step 0 (the batched forward computes every row anyway), a branch born
             into the slot discards that sample, and a sample that survives to the end completes
             its group at no extra cost. A slot freed by a prune at step l continues a copy of one
             of its group's running samples from the prompt (a speculative one or a plain row of
             the hybrid rollout): the copy shares the tokens that sample has so far and samples
             its own from there on, so it is still distributed as a sample from the policy. A
             group with no such sample running (every other slot holds a tree branch) continues
             a copy of one of its running branches instead, stochastically from there on, like a
             branch after the tree phase; in a group with nothing else running, the pruned
             sequence itself stays and runs on stochastically. Either way the slot stays free for
             later branches, and no step is added after n.
  restart    a slot freed by a prune always restarts a sample from the prompt: independent
             samples, at the price of steps after n for the samples that start late.
  duplicate  missing slots copy surviving rows round-robin: no extra forwards, but duplicates
             carry no new information for group-relative advantages.

Once every group's tree phase is over (or n steps have passed), the loop hands the running rows to a
plain sampling loop without the tree bookkeeping, which finishes them, each at its own position.

Hybrid rollout (§3.3): slots [0, k_tree) of a group run LATR, slots [k_tree, k) plain sampling, in
the same batch; k_tree = round(η·k) is a traced input, so annealing η never recompiles.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxtree.models.config import ModelConfig
from jaxtree.models.kv_cache import init_cache
from jaxtree.models.transformer import Transformer
from jaxtree.sampling.edit_distance import (levenshtein_add_column, levenshtein_add_row,
                                            levenshtein_frontier, levenshtein_read_normalized,
                                            levenshtein_reset)
from jaxtree.sampling.logits_processing import SamplingConfig, sample_tokens

# Where a slot's final sequence came from (LatrOutput.origin).
TREE, PLAIN, FRESH, DUPLICATE = 0, 1, 2, 3
COMPLETIONS = ("fresh", "restart", "duplicate")
# Row pairs moved per iteration of a copy loop (children born, slots forked) in one step.
COPY_CHUNK = 8


@dataclasses.dataclass(frozen=True)
class LatrConfig:
    """LATR hyper-parameters (defaults: LATR App. B.3)."""

    k: int = 8
    tau_abs: float = 0.25
    tau_rel: float = 0.15
    tau_ed: float = 0.4
    windows: tuple[int, ...] = (20, 30, 50)
    completion: str = "fresh"
    max_events: int = 32  # per group and kind; further branches / prunes are counted, not logged

    def __post_init__(self):
        if self.k < 1:
            raise ValueError(f"k={self.k} must be positive")
        if not self.windows or min(self.windows) < 1:
            raise ValueError(f"windows={self.windows} must be positive lengths")
        if self.completion not in COMPLETIONS:
            raise ValueError(f"completion={self.completion!r}: expected one of {COMPLETIONS}")
        if not (0 <= self.tau_abs <= 1 and 0 <= self.tau_rel <= 1 and 0 <= self.tau_ed <= 1):
            raise ValueError("tau_abs, tau_rel and tau_ed must lie in [0, 1]")


class LatrOutput(NamedTuple):
    """Per group g and slot s (P groups, k slots, n = max_new_tokens).

    tokens: int32[P, k, n], pad after each sequence's end.
    logprobs: float32[P, k, n], log π(token) at temperature 1 (importance-ratio denominators).
    mask: bool[P, k, n], the generated tokens (EOS included).
    lengths: int32[P, k].
    finished: bool[P, k], ended with EOS (else it reached n tokens).
    origin: int32[P, k], TREE | PLAIN | FRESH | DUPLICATE.
    parent: int32[P, k], the parent slot of a tree branch (-1 for the root and plain rows); for
      DUPLICATE rows, the slot duplicated; for FRESH rows, the slot whose sample it continued a
      copy of at the time (see fork_position), else -1.
    birth: int32[P, k], the step of the branch token (-1 for the root and non-tree rows).
    fork_position: int32[P, k], for a FRESH row that continued a copy of another fresh sample of
      its group ('fresh' completion of a slot freed by a prune), the position of its first own
      token (the tokens before it are the other sample's); -1 for every other row.
    tree_end_step: int32[P], the step after which the group sampled stochastically (its
      saturation length, LATR Table 10); n when the tree never saturated.
    num_branches: int32[P], children created (including later pruned ones).
    num_prunes: int32[P], children pruned directly (descendants not counted).
    branch_step, branch_parent, branch_slot, branch_token: int32[P, E]: the first E branch
      events of each group in order (-1 past num_branches).
    prune_step, prune_slot, prune_window: int32[P, E]; prune_distance: float32[P, E]; the first E
      prune events of each group (-1 / NaN past num_prunes).
    forwards: int32[P], slot-token forwards: tokens fed to the model for alive, unfinished slots.
    """

    tokens: jax.Array
    logprobs: jax.Array
    mask: jax.Array
    lengths: jax.Array
    finished: jax.Array
    origin: jax.Array
    parent: jax.Array
    birth: jax.Array
    fork_position: jax.Array
    tree_end_step: jax.Array
    num_branches: jax.Array
    num_prunes: jax.Array
    branch_step: jax.Array
    branch_parent: jax.Array
    branch_slot: jax.Array
    branch_token: jax.Array
    prune_step: jax.Array
    prune_slot: jax.Array
    prune_window: jax.Array
    prune_distance: jax.Array
    forwards: jax.Array


def with_descendants(remove: jax.Array, parent_row: jax.Array, is_child: jax.Array,
                     k: int) -> jax.Array:
    """`remove` (bool[R]) extended to every descendant: a child goes when its parent goes.

    parent_row: int32[R], each slot's parent row (ignored where `is_child` is False). k passes
    reach every descendant: a group has k slots, so no chain is longer.
    """
    for _ in range(k):
        remove = remove | (is_child & remove[parent_row])
    return remove


def _top3(probs: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The three largest probabilities per row and their tokens (lowest index first on ties, as
    `lax.top_k`). Each pass is a max and a min over the indices that reach it: two plain
    reductions, which XLA vectorizes on CPU, where `argmax` (a variadic reduction) measured 4x
    slower and `lax.top_k` (a sort) slower still."""
    vocab = probs.shape[1]
    token_ids = jnp.arange(vocab, dtype=jnp.int32)[None, :]
    values, indices = [], []
    remaining = probs
    for _ in range(3):
        value = jnp.max(remaining, axis=-1)
        index = jnp.min(jnp.where(remaining == value[:, None], token_ids, vocab), axis=-1)
        values.append(value)
        indices.append(index)
        remaining = jnp.where(token_ids == index[:, None], -1.0, remaining)
    return jnp.stack(values, axis=1), jnp.stack(indices, axis=1)


def _window(tokens: jax.Array, source_rows: jax.Array, start: jax.Array, width: int):
    """int32[R, width]: for each row r, the tokens of row source_rows[r] at positions
    start[r] .. start[r] + width - 1 (gathered directly, without copying whole token rows)."""
    n = tokens.shape[1]
    index = jnp.clip(start[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :], 0, n - 1)
    return tokens[source_rows[:, None], index]


def _branch_assignments(cand_p, cand_valid, free, k: int):
    """For one group: which candidate goes to which free slot.

    cand_p, cand_valid: [k, C] candidate probabilities and validity per slot; free: bool[k].
    Returns (dst slot int32[k], src slot int32[k], candidate column int32[k], ok bool[k]): the
    i-th best candidate goes to the i-th free slot (ascending), for i < min(#valid, #free).
    """
    columns = cand_p.shape[1]
    score = jnp.where(cand_valid, cand_p, -1.0).reshape(-1)            # slot-major order
    order = jnp.argsort(-score, stable=True)[:k]
    num = jnp.minimum(cand_valid.sum(), free.sum())
    free_slots = jnp.argsort(~free, stable=True)                       # free ones first, ascending
    ok = jnp.arange(k) < num
    return free_slots[:k].astype(jnp.int32), (order // columns).astype(jnp.int32), \
        (order % columns).astype(jnp.int32), ok


def latr_generate(model_config: ModelConfig, latr: LatrConfig, sampling: SamplingConfig,
                  max_new_tokens: int, pad_id: int, params, prompt_tokens: jax.Array,
                  prompt_lengths: jax.Array, group_ids: jax.Array, num_tree_slots: jax.Array,
                  rng: jax.Array, eos_ids: jax.Array) -> LatrOutput:
    """Generates k rollouts for each of P prompts with LATR (see the module docstring).

    Args:
      model_config, latr, sampling, max_new_tokens (n), pad_id: static.
      prompt_tokens: int32[P, L] right-padded prompts; prompt_lengths: int32[P] (>= 1).
      group_ids: int32[P], a global id per group: row (g, s) samples with
        fold_in(fold_in(rng, group_ids[g]), s), so results do not depend on how groups are
        batched or sharded.
      num_tree_slots: int32[], k_tree in [0, k] (hybrid rollout; k = pure LATR).
      eos_ids: int32[E].
    """
    k, n = latr.k, max_new_tokens
    groups, prompt_width = prompt_tokens.shape
    rows = groups * k
    capacity = prompt_width + n
    model = Transformer(model_config)
    slot = jnp.tile(jnp.arange(k, dtype=jnp.int32), groups)                  # [R]
    group_of_row = jnp.repeat(jnp.arange(groups, dtype=jnp.int32), k)         # [R]
    base = group_of_row * k                                                   # first row of group
    plain = slot >= num_tree_slots
    row_keys = jax.vmap(lambda g, s: jax.random.fold_in(jax.random.fold_in(rng, g), s))(
        jnp.repeat(group_ids, k), slot)
    uniforms = jax.vmap(lambda key: jax.vmap(lambda t: jax.random.uniform(
        jax.random.fold_in(key, t)))(jnp.arange(2 * n, dtype=jnp.uint32)))(row_keys)  # [R, 2n]

    # Prefill each prompt once, then give every slot a copy of its group's prompt cache.
    prompt_cache = init_cache(model_config, groups, capacity)
    prompt_logits, prompt_cache = model.apply({"params": params}, prompt_tokens, prompt_cache,
                                              prompt_lengths, last_only=True)
    cache = jax.tree_util.tree_map(lambda x: jnp.repeat(x, k, axis=0), prompt_cache)
    root_logits = jnp.repeat(prompt_logits, k, axis=0)                        # [R, V]

    events = latr.max_events
    r_max = max(latr.windows)
    state0 = dict(
        step=jnp.int32(0), cache=cache, logits=root_logits,
        tokens=jnp.full((rows, n), pad_id, jnp.int32),
        logprobs=jnp.zeros((rows, n), jnp.float32),
        alive=plain | ((slot == 0) & (num_tree_slots > 0)),   # the root and every plain slot
        finished=jnp.zeros((rows,), bool), lengths=jnp.zeros((rows,), jnp.int32),
        parent=jnp.full((rows,), -1, jnp.int32), birth=jnp.full((rows,), -1, jnp.int32),
        # without tree slots there is no tree phase
        saturated=jnp.full((groups,), num_tree_slots <= 0),
        tree_end=jnp.full((groups,), jnp.where(num_tree_slots <= 0, 0, n), jnp.int32),
        num_branches=jnp.zeros((groups,), jnp.int32), num_prunes=jnp.zeros((groups,), jnp.int32),
        branch_step=jnp.full((groups, events), -1, jnp.int32),
        branch_parent=jnp.full((groups, events), -1, jnp.int32),
        branch_slot=jnp.full((groups, events), -1, jnp.int32),
        branch_token=jnp.full((groups, events), -1, jnp.int32),
        prune_step=jnp.full((groups, events), -1, jnp.int32),
        prune_slot=jnp.full((groups, events), -1, jnp.int32),
        prune_window=jnp.full((groups, events), -1, jnp.int32),
        prune_distance=jnp.full((groups, events), jnp.nan, jnp.float32),
        forwards=jnp.zeros((groups,), jnp.int32),
    )

    prompt_len_rows = jnp.repeat(prompt_lengths, k)
    state0.update(ed=levenshtein_frontier(rows, r_max), ed_a=jnp.zeros((rows,), jnp.int32),
                  ed_b=jnp.zeros((rows,), jnp.int32), fork_position=jnp.full((rows,), -1, jnp.int32),
                  fork_source=jnp.full((rows,), -1, jnp.int32))
    # 'fresh' and 'restart' completion: free tree slots sample from the prompt while nothing else
    # uses them (the batched forward computes every row anyway); a branch born into a slot
    # discards its sample, and samples that survive to the end complete their groups.
    state0["shadow"] = ~state0["alive"] & ~plain & (latr.completion != "duplicate")
    copy_chunk = min(rows, COPY_CHUNK)

    def cond(s):
        running = (s["alive"] | s["shadow"]) & ~s["finished"]
        return (s["step"] < n) & jnp.any(running) & ~jnp.all(s["saturated"])

    def body(s):
        l = s["step"]
        active = s["alive"] & ~s["finished"]
        shadow_running = s["shadow"] & ~s["finished"]
        logits = s["logits"]
        logp_all = jax.nn.log_softmax(logits, axis=-1)
        probs = jnp.exp(logp_all)       # one normalisation pass instead of two
        tree_mode = active & ~plain & ~s["saturated"][group_of_row]

        # extend: argmax in tree mode, sampling otherwise
        sampled, _, _ = sample_tokens(uniforms[:, l], logits, sampling)
        top_p, top_tok = _top3(probs)
        token = jnp.where(tree_mode, top_tok[:, 0], sampled)
        token = jnp.where(active | shadow_running, token, pad_id)
        token_logp = jnp.take_along_axis(logp_all, token[:, None], axis=1)[:, 0]

        # branch: candidates 2 and 3 of the top-3 (no more than two tokens besides c* can exceed
        # τ_abs >= 1/4; for smaller τ_abs the most likely two are the ones considered)
        cand_p, cand_tok = top_p[:, 1:], top_tok[:, 1:]
        cand_valid = (tree_mode[:, None] & (cand_p > latr.tau_abs)
                      & (top_p[:, :1] - cand_p < latr.tau_rel))
        free = ~s["alive"] & ~plain & ~s["saturated"][group_of_row]
        dst, src, col, ok = jax.vmap(_branch_assignments, in_axes=(0, 0, 0, None))(
            cand_p.reshape(groups, k, 2), cand_valid.reshape(groups, k, 2),
            free.reshape(groups, k), k)
        group_base = (jnp.arange(groups, dtype=jnp.int32) * k)[:, None]
        dst_row = jnp.where(ok, group_base + dst, rows).reshape(-1)           # rows = no copy
        src_row = (group_base + src).reshape(-1)
        child_tok = cand_tok[src_row, col.reshape(-1)]
        child_logp = jnp.log(cand_p[src_row, col.reshape(-1)])
        born = jnp.zeros((rows,), bool).at[dst_row].set(True, mode="drop")
        # a child starts as a copy of its parent: cache row, token and log-prob rows
        copied = _copy_rows(dict(cache=s["cache"], tokens=s["tokens"], logprobs=s["logprobs"]),
                            src_row, dst_row, copy_chunk)
        cache, tokens, logprobs = copied["cache"], copied["tokens"], copied["logprobs"]
        token = token.at[dst_row].set(child_tok, mode="drop")
        token_logp = token_logp.at[dst_row].set(child_logp, mode="drop")
        parent = s["parent"].at[dst_row].set(src_row - base[src_row], mode="drop")
        birth = s["birth"].at[dst_row].set(l, mode="drop")
        alive = s["alive"] | born
        active = active | born
        shadow = s["shadow"] & ~born
        fork_position = jnp.where(born, -1, s["fork_position"])
        fork_source = jnp.where(born, -1, s["fork_source"])
        writing = active | (shadow & ~s["finished"])
        # log births in allocation order (ok is a prefix of each group's k assignments)
        b_target = jnp.where(ok, s["num_branches"][:, None] + jnp.arange(k)[None, :], events)
        gi_k = jnp.repeat(jnp.arange(groups)[:, None], k, axis=1)
        blog = lambda buf, val: buf.at[gi_k, b_target].set(val, mode="drop")
        branch_log = dict(branch_step=blog(s["branch_step"], jnp.full((groups, k), l, jnp.int32)),
                          branch_parent=blog(s["branch_parent"], src),
                          branch_slot=blog(s["branch_slot"], dst),
                          branch_token=blog(s["branch_token"], child_tok.reshape(groups, k)))
        num_branches = s["num_branches"] + ok.sum(axis=1).astype(jnp.int32)

        # write this step's tokens; a slot finishes on EOS or at the last position. Tree and
        # plain rows write position l; a fresh sample writes at its own length (a restarted one
        # is behind)
        pos = jnp.where(shadow, s["lengths"], l)
        tokens, logprobs, lengths, ends = _write_step(tokens, logprobs, s["lengths"], pos,
                                                      writing, token, token_logp, eos_ids, n)
        finished = jnp.where(born, ends, s["finished"] | ends)

        # prune children whose lookahead window ends now (Alg. 1 line 23: birth = l - r)
        remove = jnp.zeros((rows,), bool)
        is_child = alive & (parent >= 0) & ~plain
        parent_row = base + jnp.maximum(parent, 0)
        # extend each lookahead child's edit-distance frontier by this step's tokens: the
        # child's window (positions birth+1 ..) adds a row, its parent's a column; a newborn's
        # starts empty
        looking = is_child & (birth < l) & (l <= birth + r_max)
        ed = levenshtein_reset(s["ed"], born)
        ed_a = jnp.where(born, 0, s["ed_a"])
        ed_b = jnp.where(born, 0, s["ed_b"])
        child_window = _window(tokens, jnp.arange(rows), birth + 1, r_max)
        parent_window = _window(tokens, parent_row, birth + 1, r_max)
        grow_a = looking & writing & (ed_a < r_max)
        grow_b = looking & writing[parent_row] & (ed_b < r_max)
        ed = levenshtein_add_row(ed, jnp.minimum(ed_a, r_max - 1), ed_b, tokens[:, l],
                                 parent_window, grow_a)
        ed_a = ed_a + grow_a
        ed = levenshtein_add_column(ed, ed_a, jnp.minimum(ed_b, r_max - 1),
                                    tokens[parent_row, l], child_window, grow_b)
        ed_b = ed_b + grow_b
        distance = levenshtein_read_normalized(ed, ed_a, ed_b)
        prune_window = jnp.full((rows,), -1, jnp.int32)
        prune_distance = jnp.full((rows,), jnp.nan, jnp.float32)
        for r in latr.windows:
            # at step birth + r both windows hold at most r tokens: the frontier corner is the
            # distance over the window (each cut after its EOS)
            check = is_child & (birth == l - r) & ~remove
            pruned_here = check & (distance < latr.tau_ed)
            prune_window = jnp.where(pruned_here, r, prune_window)
            prune_distance = jnp.where(pruned_here, distance, prune_distance)
            remove = remove | pruned_here
        direct = remove
        remove = with_descendants(remove, parent_row, is_child, k)
        alive = alive & ~remove

        # completion of the freed slots (see the module docstring)
        fed_token = token
        restart = jnp.zeros((rows,), bool)
        if latr.completion == "fresh":
            # what a freed slot continues: a copy of one of the group's running samples from the
            # prompt (speculative or plain), else of one of its running tree branches; the j-th
            # freed slot of a group copies the (j mod m)-th of its m sources. With nothing else
            # running, the pruned sequence itself stays (and runs on stochastically if it can).
            running = writing & ~ends & ~remove
            from_prompt = ((shadow | plain) & running).reshape(groups, k)
            from_tree = (alive & ~plain & running).reshape(groups, k)
            source = jnp.where(from_prompt.any(axis=1, keepdims=True), from_prompt, from_tree)
            freed = remove.reshape(groups, k)
            count = source.sum(axis=1, keepdims=True)
            source_order = jnp.argsort(~source, axis=1, stable=True)
            rank = jnp.cumsum(freed, axis=1) - 1
            pick = jnp.take_along_axis(source_order, rank % jnp.maximum(count, 1), axis=1)
            forked = (freed & (count > 0)).reshape(-1)
            fork_src = jnp.where(forked, (group_base + pick).reshape(-1), rows)
            copied = _copy_rows(
                dict(cache=cache, tokens=tokens, logprobs=logprobs, lengths=lengths,
                     token=fed_token),
                fork_src, jnp.where(forked, jnp.arange(rows), rows), copy_chunk)
            cache, tokens, logprobs = copied["cache"], copied["tokens"], copied["logprobs"]
            lengths, fed_token = copied["lengths"], copied["token"]
            finished = jnp.where(forked, False, finished)
            kept = remove & ~forked
            fork_position = jnp.where(forked, lengths, jnp.where(kept, birth, fork_position))
            fork_source = jnp.where(forked, fork_src - base, jnp.where(kept, parent, fork_source))
            shadow = shadow | remove
        elif latr.completion == "restart":
            # a freed slot restarts a sample from the prompt (its cache row still holds the
            # prompt: all slots of a group share it)
            restart = remove
            tokens = jnp.where(restart[:, None], pad_id, tokens)
            logprobs = jnp.where(restart[:, None], 0.0, logprobs)
            lengths = jnp.where(restart, 0, lengths)
            finished = jnp.where(restart, False, finished)
            cache = cache._replace(lengths=jnp.where(restart, prompt_len_rows, cache.lengths))
            shadow = shadow | remove

        # log direct prunes (first E per group)
        direct_g = direct.reshape(groups, k)
        rank = jnp.cumsum(direct_g, axis=1) - 1 + s["num_prunes"][:, None]
        target = jnp.where(direct_g & (rank < events), rank, events)
        gi = jnp.repeat(jnp.arange(groups)[:, None], k, axis=1)
        log = lambda buf, val: buf.at[gi, target].set(val.reshape(groups, k), mode="drop")
        prune_step_log = log(s["prune_step"], jnp.full((rows,), l, jnp.int32))
        prune_slot_log = log(s["prune_slot"], slot)
        prune_window_log = log(s["prune_window"], prune_window)
        prune_distance_log = log(s["prune_distance"], prune_distance)
        num_prunes = s["num_prunes"] + direct_g.sum(axis=1).astype(jnp.int32)

        # saturation: k_tree alive tree slots, none younger than the largest window
        tree_alive = (alive & ~plain).reshape(groups, k)
        young = (alive & (parent >= 0) & (birth > l - r_max) & ~plain).reshape(groups, k)
        now_saturated = ~s["saturated"] & (tree_alive.sum(axis=1) >= num_tree_slots) & \
            ~young.any(axis=1)
        saturated = s["saturated"] | now_saturated
        tree_end = jnp.where(now_saturated, l + 1, s["tree_end"])
        # a group whose every slot has finished ends its tree phase too
        group_running = (alive & ~finished).reshape(groups, k).any(axis=1)
        tree_end = jnp.where((tree_end == n) & ~group_running, l + 1, tree_end)

        # forward this step's tokens (children and forks included; removed, restarted and
        # finished rows idle)
        feed = (alive | shadow) & ~finished & ~restart
        new_logits, cache = model.apply({"params": params}, fed_token[:, None], cache,
                                        feed.astype(jnp.int32), last_only=True)
        forwards = s["forwards"] + feed.reshape(groups, k).sum(axis=1).astype(jnp.int32)
        new_logits = jnp.where(feed[:, None], new_logits, logits)
        return dict(
            step=l + 1, cache=cache,
            logits=jnp.where(restart[:, None], root_logits, new_logits),
            tokens=tokens, logprobs=logprobs, alive=alive, shadow=shadow, finished=finished,
            lengths=lengths, ed=ed, ed_a=ed_a, ed_b=ed_b, fork_position=fork_position,
            fork_source=fork_source,
            parent=jnp.where(alive, parent, -1), birth=jnp.where(alive, birth, -1),
            saturated=saturated, tree_end=tree_end, num_branches=num_branches,
            num_prunes=num_prunes, **branch_log, prune_step=prune_step_log, prune_slot=prune_slot_log,
            prune_window=prune_window_log, prune_distance=prune_distance_log,
            forwards=forwards)

    s = jax.lax.while_loop(cond, body, state0)
    # every group's tree phase is over (or the budget of n steps is spent): the running rows
    # (saturated tree rows, plain rows, fresh samples) finish by plain sampling, each at its own
    # position, without the tree bookkeeping
    s = _sample_rest(model, sampling, n, pad_id, params, s, uniforms, eos_ids, k)
    origin = jnp.where(plain, PLAIN, TREE)
    missing = ~s["alive"] & ~plain                                            # tree deficit
    parent, birth, fork_position = s["parent"], s["birth"], s["fork_position"]
    tokens, logprobs, lengths = s["tokens"], s["logprobs"], s["lengths"]
    if latr.completion == "duplicate":
        # the j-th missing slot of a group copies the group's (j mod #alive)-th alive tree slot
        alive_g = (s["alive"] & ~plain).reshape(groups, k)
        alive_order = jnp.argsort(~alive_g, axis=1, stable=True)
        count = jnp.maximum(alive_g.sum(axis=1, keepdims=True), 1)
        missing_rank = jnp.cumsum(missing.reshape(groups, k), axis=1) - 1
        source_slot = jnp.take_along_axis(alive_order, missing_rank % count, axis=1)
        source = (jnp.arange(groups)[:, None] * k + source_slot).reshape(-1)
        pick = lambda x: jnp.where(missing.reshape((rows,) + (1,) * (x.ndim - 1)), x[source], x)
        tokens, logprobs, lengths = pick(tokens), pick(logprobs), pick(lengths)
        parent = jnp.where(missing, source_slot.reshape(-1), parent)
        birth = jnp.where(missing, -1, birth)
        origin = jnp.where(missing, DUPLICATE, origin)
    else:
        origin = jnp.where(missing, FRESH, origin)
        parent = jnp.where(missing, s["fork_source"], parent)
    mask = jnp.arange(n)[None, :] < lengths[:, None]
    last = jnp.take_along_axis(tokens, jnp.maximum(lengths - 1, 0)[:, None], axis=1)[:, 0]
    finished = (lengths > 0) & jnp.any(last[:, None] == eos_ids[None, :], axis=1)
    shape = lambda x: x.reshape((groups, k) + x.shape[1:])
    return LatrOutput(
        shape(jnp.where(mask, tokens, pad_id)), shape(jnp.where(mask, logprobs, 0.0)),
        shape(mask), shape(lengths), shape(finished), shape(origin), shape(parent), shape(birth),
        shape(jnp.where(origin == FRESH, fork_position, -1)),
        jnp.minimum(s["tree_end"], s["step"]),
        s["num_branches"], s["num_prunes"], s["branch_step"], s["branch_parent"],
        s["branch_slot"], s["branch_token"], s["prune_step"], s["prune_slot"], s["prune_window"],
        s["prune_distance"], s["forwards"])


def _copy_rows(arrays, src: jax.Array, dst: jax.Array, chunk: int):
    """Row src[i] -> row dst[i] in every array of the pytree `arrays` (leading axis: rows), for
    every i with dst[i] < rows; the other pairs are no-ops. Sources and destinations are
    disjoint.

    Pairs are moved `chunk` at a time under a while loop, so a step that copies a few rows moves
    only those rows: a single gather over every pair would read and rewrite the whole KV cache at
    every step with a branch.
    """
    rows = jax.tree_util.tree_leaves(arrays)[0].shape[0]
    pairs = dst.shape[0]
    pending = dst < rows
    count = pending.sum()
    # the pending pairs first, in order (a scatter to their ranks: cheaper than a sort), then
    # `chunk` no-op pairs so the last dynamic slice never reads past the end
    rank = jnp.where(pending, jnp.cumsum(pending) - 1, pairs + chunk)
    src = jnp.zeros((pairs + chunk,), src.dtype).at[rank].set(src, mode="drop")
    dst = jnp.full((pairs + chunk,), rows, dst.dtype).at[rank].set(dst, mode="drop")

    def move(carry):
        start, arrays = carry
        s = jax.lax.dynamic_slice(src, (start,), (chunk,))
        d = jax.lax.dynamic_slice(dst, (start,), (chunk,))
        return start + chunk, jax.tree_util.tree_map(
            lambda x: x.at[d].set(x[s], mode="drop"), arrays)

    return jax.lax.while_loop(lambda c: c[0] < count, move, (jnp.int32(0), arrays))[1]


def _write_step(tokens, logprobs, lengths, pos, writing, token, token_logp, eos_ids, n):
    """Writes each `writing` row's token at its position `pos`; returns the new token, log-prob
    and length rows and which rows ended (EOS, or the last of n positions)."""
    row_ids = jnp.arange(tokens.shape[0])
    pos = jnp.minimum(pos, n - 1)
    tokens = tokens.at[row_ids, pos].set(jnp.where(writing, token, tokens[row_ids, pos]))
    logprobs = logprobs.at[row_ids, pos].set(jnp.where(writing, token_logp,
                                                       logprobs[row_ids, pos]))
    lengths = jnp.where(writing, pos + 1, lengths)
    hit_eos = jnp.any(token[:, None] == eos_ids[None, :], axis=1)
    return tokens, logprobs, lengths, writing & (hit_eos | (pos + 1 >= n))


def _sample_rest(model, sampling, n, pad_id, params, s, uniforms, eos_ids, k):
    """Plain sampling for every running row (alive or fresh, unfinished) at its own position
    until all have finished; step l draws uniforms[:, l] as in the tree loop."""
    rows = s["finished"].shape[0]
    groups = rows // k

    def cond(c):
        return jnp.any(c["running"])

    def body(c):
        l = c["step"]
        active = c["running"]
        token, policy_logp, _ = sample_tokens(uniforms[:, l], c["logits"], sampling)
        token = jnp.where(active, token, pad_id)
        tokens, logprobs, lengths, ends = _write_step(c["tokens"], c["logprobs"], c["lengths"],
                                                      c["lengths"], active, token, policy_logp,
                                                      eos_ids, n)
        feed = active & ~ends
        logits, cache = model.apply({"params": params}, token[:, None], c["cache"],
                                    feed.astype(jnp.int32), last_only=True)
        return dict(c, step=l + 1, cache=cache, logits=jnp.where(feed[:, None], logits,
                                                                  c["logits"]),
                    tokens=tokens, logprobs=logprobs, lengths=lengths,
                    finished=c["finished"] | ends, running=feed,
                    forwards=c["forwards"] + feed.reshape(groups, k).sum(axis=1).astype(
                        jnp.int32))

    c = dict(s, running=(s["alive"] | s["shadow"]) & ~s["finished"])
    c = jax.lax.while_loop(cond, body, c)
    del c["running"]
    return c


_STATIC = ("model_config", "latr", "sampling", "max_new_tokens", "pad_id")
latr_generate_jit = jax.jit(latr_generate, static_argnames=_STATIC)


def latr_generate_sharded(mesh, model_config: ModelConfig, latr: LatrConfig,
                          sampling: SamplingConfig, max_new_tokens: int, pad_id: int, params,
                          prompt_tokens: jax.Array, prompt_lengths: jax.Array,
                          group_ids: jax.Array, num_tree_slots: jax.Array, rng: jax.Array,
                          eos_ids: jax.Array) -> LatrOutput:
    """`latr_generate` under `jax.shard_map`: each device of the mesh's batch axes (data x fsdp)
    owns whole prompt groups (P must divide evenly) and runs the kernel on them with replicated
    parameters. Trees never span devices, so there is no communication; rows sample with keys
    derived from the global `group_ids`, so the result equals the single-device one."""
    from jax.sharding import PartitionSpec as P

    from jaxtree.train.mesh import BATCH_AXES

    groups = P(BATCH_AXES)
    kernel = functools.partial(latr_generate, model_config, latr, sampling, max_new_tokens,
                               pad_id)
    out_specs = LatrOutput(*([groups] * len(LatrOutput._fields)))
    sharded = jax.shard_map(kernel, mesh=mesh,
                            in_specs=(P(), groups, groups, groups, P(), P(), P()),
                            out_specs=out_specs, check_vma=False)
    return jax.jit(sharded)(params, prompt_tokens, prompt_lengths, group_ids, num_tree_slots,
                            rng, eos_ids)
