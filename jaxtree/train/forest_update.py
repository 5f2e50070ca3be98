"""The prefix-shared update: micro-batches of whole groups as token trees, one step over them.

`plan_forest` turns a minibatch (host arrays, `losses.Minibatch`) and its rows' groups into
forest micro-batches (`losses.ForestMinibatch`): each group's trajectories become one token tree
in blocks (`jaxtree.train.prefix_forest`), the trees are laid into rows of NB blocks and S
trajectory slots, and R rows make a micro-batch. Shapes are bucketed so that compilation stays
bounded: NB to a multiple of 8, A (ancestor slots) to a power of two up to 8 then a multiple of
8, S to a power of two, R so that a micro-batch holds about the tokens of a per-trajectory
micro-batch (`token_budget`).

`ForestSteps(updater, block)` runs them with the updater's optimizer, loss and mesh:

    state, metrics = forest.step(state, plan_forest(mb, group_ids, ...))    # one optimizer step
    logprobs = forest.logprobs(params, tokens, widths, group_ids)          # [B, W], reference

Rows are split over the mesh's data x fsdp axes like a per-trajectory micro-batch's, a row with
its trajectories (a group never spans two devices); the loss is the per-trajectory loss exactly
(`losses.forest_minibatch_loss`).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxtree import losses
from jaxtree.losses import ForestMinibatch, Minibatch
from jaxtree.models.token_scores import tree_token_scores
from jaxtree.models.tree_blocks import TreeBlocks
from jaxtree.parallel import distributed
from jaxtree.parallel.mesh import batch_parallelism
from jaxtree.train.prefix_forest import GroupTree, group_trees, pack_forest
from jaxtree.train.update import needed_widths
from jaxtree.utils import power_of_two_at_least, round_up


def _ancestor_bucket(n: int) -> int:
    """Ancestor slots for a deepest path of n blocks: a power of two up to 8, then a multiple of
    8. Every block's attention reads all A slots, so a power of two past 8 would waste up to
    half of the tree attention on padding (a 1,224-token chat trajectory in blocks of 32 has 39
    ancestors: 40 slots, not 64), for a few more compiled shapes."""
    return power_of_two_at_least(n) if n <= 8 else round_up(n, 8)


ANCESTOR_CLASSES = 4  # at most this many ancestor classes per forest (tree_blocks)


def ancestor_classes(counts: np.ndarray, ancestor_slots: int,
                     most: int = ANCESTOR_CLASSES) -> tuple[tuple[int, int], ...]:
    """The ancestor classes ((blocks, slots), ...) of forest rows whose blocks have `counts`
    ancestors (int[R, NB]): up to `most` classes of `_ancestor_bucket` slots evenly up to
    `ancestor_slots`, each class's block count the most any row needs there, rounded up to a
    multiple of 8 and of an eighth of NB (so few distinct shapes compile); a row's surplus
    blocks of a class are filled by its next deepest ones.

    A block's attention costs its class's slots, so the classes cut the tree attention where
    depths differ: in a PATR batch of 12 SmolLM2 FrozenLake episodes (168 blocks of 32 tokens,
    up to 40 ancestors) 4 classes read 0.67 of one class's slots (2: 0.78, 8: 0.67; exact
    slots per block would be 0.53), and the update took 0.80x the one-class forest's time
    (docs/benchmarks.md, "Prefix-shared update")."""
    rows, blocks = counts.shape
    quantum = round_up(max(blocks // 8, 1), 8)
    bounds = sorted({_ancestor_bucket(max(1, -(-ancestor_slots * c // most)))
                     for c in range(1, most + 1)} | {ancestor_slots})
    bounds = [b for b in bounds if b <= ancestor_slots]
    # need[c]: blocks of some row needing more than bounds[c - 1] slots (classes >= c)
    need = [blocks] + [min(blocks, round_up(int((counts > b).sum(-1).max(initial=0)), quantum))
                       for b in bounds[:-1]]
    classes = []
    for c, slots in enumerate(bounds):
        n = need[c] - (need[c + 1] if c + 1 < len(need) else 0)
        if n > 0:
            classes.append((n, slots))
    return tuple(classes)


def _rows_of(trees: list[GroupTree], blocks: int, slots: int) -> list[list[GroupTree]]:
    """The trees laid into rows in order, a new row when the next tree does not fit."""
    rows, current, used_blocks, used_slots = [], [], 0, 0
    for tree in trees:
        if current and (used_blocks + tree.num_blocks > blocks
                        or used_slots + len(tree.rows) > slots):
            rows.append(current)
            current, used_blocks, used_slots = [], 0, 0
        current.append(tree)
        used_blocks, used_slots = used_blocks + tree.num_blocks, used_slots + len(tree.rows)
    if current:
        rows.append(current)
    return rows


def plan_forest(mb: Minibatch, group_ids: np.ndarray, block: int, row_multiple: int,
                token_budget: int, width_multiple: int = 64, action_only: bool = False
                ) -> list[tuple[ForestMinibatch, np.ndarray]]:
    """Forest micro-batches (host arrays, all of one shape), each with the batch row of every
    trajectory slot (int[R x S], -1 for an empty one), holding every row of `mb` that has a loss
    (rows without an action token or weight are left out, as in the by-length step).
    `action_only`: each forest row scores only the tree tokens that are some trajectory's action
    tokens (`score_index`, K slots a power of two, one K for the whole plan)."""
    mb = Minibatch(*(np.asarray(x) for x in mb))
    widths = needed_widths(mb.action_mask, mb.weights)
    trees = [t for t in group_trees(mb.tokens, widths, np.asarray(group_ids), block)
             if t.num_blocks]
    width = round_up(int(widths.max(initial=1)), width_multiple)
    blocks = round_up(max((t.num_blocks for t in trees), default=1), 8)
    slots = power_of_two_at_least(max((len(t.rows) for t in trees), default=1))
    ancestor_slots = _ancestor_bucket(max((len(a) for t in trees for a in t.ancestors),
                                          default=1))
    rows = _rows_of(trees, blocks, slots)
    counts = np.zeros((max(len(rows), 1), blocks), np.int64)
    for r, row in enumerate(rows):
        row_counts = [len(a) for t in row for a in t.ancestors]
        counts[r, :len(row_counts)] = row_counts
    classes = ancestor_classes(counts, ancestor_slots)
    per_call = max(row_multiple, token_budget // (blocks * block) // row_multiple * row_multiple)
    per_call = min(per_call, round_up(max(len(rows), 1), row_multiple))
    out = []
    for start in range(0, max(len(rows), 1), per_call):
        packed = pack_forest_rows(rows[start:start + per_call], per_call, blocks, slots,
                                  ancestor_slots, block, width, classes)
        out.append((_forest_minibatch(mb, packed, width), packed.slots.reshape(-1)))
    return _action_only(out) if action_only else out


def _action_only(plan: list[tuple[ForestMinibatch, np.ndarray]]
                 ) -> list[tuple[ForestMinibatch, np.ndarray]]:
    """The plan's micro-batches with `score_index`: per row, the tree tokens some trajectory
    scores (action tokens or nonzero weights) in K slots, token_index remapped into them (a
    column that scores nothing points at slot 0: its weight is zero)."""
    scored_rows, scored_tokens = [], []
    for fmb, _ in plan:
        t = fmb.trajectories
        rows = fmb.token_index.shape[0]
        scored = losses.scored_columns(t.action_mask, t.weights).reshape(rows, -1)
        scored_rows.append(scored)
        scored_tokens.append([np.unique(index[used]) for index, used in
                              zip(np.asarray(fmb.token_index), scored)])
    most = max((len(u) for row in scored_tokens for u in row), default=1)
    flat = plan[0][0].predictor.shape[1] * plan[0][0].predictor.shape[2]
    slots = losses.slot_count(most, flat)
    out = []
    for (fmb, slot_rows), scored, rows in zip(plan, scored_rows, scored_tokens):
        score_index = np.full((len(rows), slots), -1, np.int32)
        token_index = np.zeros_like(np.asarray(fmb.token_index))
        for r, unique in enumerate(rows):
            score_index[r, :len(unique)] = unique
            # each scored column's token is in `unique`: its slot there
            token_index[r] = np.where(scored[r], np.searchsorted(unique, fmb.token_index[r]), 0)
        out.append((fmb._replace(token_index=token_index, score_index=score_index), slot_rows))
    return out


def pack_forest_rows(rows: list[list[GroupTree]], count: int, blocks: int, slots: int,
                     ancestor_slots: int, block: int, width: int, classes=None):
    """`pack_forest` of trees already assigned to rows: row r of the result holds rows[r]."""
    parts = [pack_forest(row, 1, blocks, slots, ancestor_slots, block, width, classes)
             for row in rows]
    empty = pack_forest([], 1, blocks, slots, ancestor_slots, block, width, classes)
    parts += [empty] * (count - len(parts))
    fields = {f: np.concatenate([getattr(p, f) for p in parts])
              for f in ("tokens", "positions", "valid", "predictor", "slots", "token_index")}
    ancestors = tuple(np.concatenate(c) for c in zip(*(p.ancestors for p in parts)))
    return type(empty)(ancestors=ancestors, **fields)


def _forest_minibatch(mb: Minibatch, packed, width: int) -> ForestMinibatch:
    """The ForestMinibatch of a packed forest: each slot's arrays from its batch row (zeros, so
    no loss, for an empty slot), cut to `width` columns."""
    slot_rows = packed.slots.reshape(-1)
    filler = slot_rows < 0
    index = np.where(filler, 0, slot_rows)

    def take(x, zero):
        x = np.asarray(x)[index, :width]
        if x.shape[1] < width:
            x = np.pad(x, ((0, 0), (0, width - x.shape[1])))
        return np.where(filler[:, None], np.zeros((), x.dtype), x) if zero else x

    trajectories = Minibatch(*(take(x, zero=name != "tokens")
                               for name, x in zip(Minibatch._fields, mb)))
    rows = packed.tokens.shape[0]
    return ForestMinibatch(
        trajectories, packed.tokens,
        TreeBlocks(packed.positions, packed.valid, packed.ancestors), packed.predictor,
        packed.token_index[:, :, :width].reshape(rows, -1))


class ForestSteps:
    """The prefix-shared update and log-probs of an `Updater` (its optimizer, loss, memory
    trade-offs and mesh), with token trees in blocks of `block` tokens."""

    def __init__(self, updater, block: int = 32):
        self.updater = updater
        self.block = block
        u = updater
        # every distinct shape the jitted calls have seen: each is one compilation, so its count
        # says whether the bucketing keeps compilation bounded (reported as update/forest_shapes)
        self.shapes: set[tuple] = set()
        # the updater's jitting: its shardings, and with LoRA its frozen base passed in
        self._accumulate = u.jit_accumulate(losses.forest_minibatch_loss)
        self._scores = u.jit_scores(
            lambda params, tokens, tree, predictor: tree_token_scores(
                u.model_config, params, tokens, tree, predictor, u.memory)[0], 3)

    def plan(self, mb: Minibatch, group_ids: np.ndarray, action_only: bool | None = None):
        """`plan_forest` with rows a multiple of the mesh's batch parallelism, and a token
        budget of a per-trajectory micro-batch of the minibatch's width; action-only scoring
        as the updater's `memory.action_only` unless `action_only` says."""
        u = self.updater
        width = round_up(int(needed_widths(mb.action_mask, mb.weights).max(initial=1)),
                         u.width_multiple)
        # rows of trees are split over the mesh's batch axes, so their count need only be a
        # multiple of those (not of the per-trajectory micro-batch size: a forest row holds a
        # whole group, and padding to micro_batch_size rows would compute empty rows)
        if action_only is None:
            action_only = u.memory.action_only
        return plan_forest(mb, group_ids, self.block, batch_parallelism(u.mesh),
                           u.row_multiple * width, u.width_multiple, action_only)

    def step(self, state, micro_batches: list[ForestMinibatch]):
        """One optimizer step on the forest micro-batches of one minibatch (host arrays, one
        shape): accumulated in power-of-two runs of one `lax.scan` call each."""
        u = self.updater
        carry = u._zero_carry(state.params)
        for run in _power_of_two_runs(len(micro_batches)):
            stacked = jax.tree.map(lambda *xs: np.stack(xs), *micro_batches[run])
            self.shapes.add(("step",) + _shape_key(stacked))
            carry = self._accumulate(state.params, carry,
                                     distributed.put(stacked, u.micro_batch_sharding))
        return u._apply(state, carry)

    def logprobs(self, params, tokens: np.ndarray, widths: np.ndarray,
                 group_ids: np.ndarray) -> np.ndarray:
        """float32[B, T] log-probs of every row's tokens up to its width (0 after), each shared
        prefix token computed once."""
        tokens = np.asarray(tokens)
        mask = np.arange(tokens.shape[1])[None, :] < np.asarray(widths)[:, None]
        zeros = np.zeros(tokens.shape, np.float32)
        mb = Minibatch(tokens, mask, zeros, zeros, mask.astype(np.float32), zeros)
        out = np.zeros(tokens.shape, np.float32)
        put = lambda x: distributed.put(x, self.updater.batch_sharding)  # noqa: E731
        for fmb, slot_rows in self.plan(mb, group_ids, action_only=False):
            self.shapes.add(("logprobs",) + _shape_key((fmb.tokens, fmb.tree)))
            scores = distributed.host_array(self._scores(
                params, put(fmb.tokens), put(fmb.tree), put(fmb.predictor)))
            per_slot = np.take_along_axis(scores, fmb.token_index, axis=1).reshape(
                len(slot_rows), -1)
            for slot, row in enumerate(slot_rows):
                if row >= 0:
                    w = min(int(widths[row]), per_slot.shape[1])
                    out[row, :w] = per_slot[slot, :w]
        return out


def _shape_key(tree) -> tuple:
    return tuple(np.shape(x) for x in jax.tree_util.tree_leaves(tree))


def _power_of_two_runs(count: int) -> list[slice]:
    """0..count cut into consecutive power-of-two runs, largest first (7 -> 4, 2, 1)."""
    runs, start = [], 0
    while start < count:
        size = 1 << ((count - start).bit_length() - 1)
        runs.append(slice(start, start + size))
        start += size
    return runs
