"""The prefix forest of a batch: each group's trajectories as one token tree, in blocks.

Trajectories of a rollout group share token prefixes: the prompt, a tree rollout's trunk, LATR's
branches, a beam's history. Identical causal prefixes have identical activations, so an update
that computes each unique prefix token once is exact. From the token rows alone (whatever
strategy made them), `group_trees` builds per group the trie of the rows' prefixes, cut into
blocks of at most T tokens that never span a branching point; `pack_forest` lays the blocks of
whole groups into R rows of NB blocks (`jaxtree.models.tree_blocks.TreeBlocks` plus the tokens,
each token's predictor and each trajectory's token index), the shapes the forest update runs on.

    trees = group_trees(tokens, lengths, group_ids, block=32)     # host, numpy
    forest = pack_forest(trees, rows_index, ...)                    # one micro-batch

A row is cut at `lengths[i]` (the columns its loss needs); rows that are prefixes of others, and
duplicated rows, add no token. `unique_fraction` = unique tokens / tokens of the rows.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


@dataclasses.dataclass
class GroupTree:
    """One group's token tree in blocks (host arrays).

    Attributes:
      rows: int[n], the batch rows of the group (the trajectories).
      block_tokens / block_positions: int32[nb, T], each block's tokens and their depths.
      block_lengths: int32[nb], real tokens per block.
      ancestors: list of int lists, per block the blocks above it on its path.
      predictor: int32[nb, T], flat index (block x T + offset) of the token before each token on
        its path, -1 for the first token of a trajectory (nothing to predict it from).
      token_index: int32[n, L], flat index of each row position (< the row's length) in the
        tree; 0 past it.
    """

    rows: np.ndarray
    block_tokens: np.ndarray
    block_positions: np.ndarray
    block_lengths: np.ndarray
    ancestors: list[list[int]]
    predictor: np.ndarray
    token_index: np.ndarray

    @property
    def num_blocks(self) -> int:
        return len(self.block_lengths)

    @property
    def unique_tokens(self) -> int:
        return int(self.block_lengths.sum())


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


def build_tree(sequences: Sequence[np.ndarray], rows: np.ndarray, width: int,
               block: int) -> GroupTree:
    """The token tree of one group's sequences (int32 arrays, the batch `rows`), in blocks of at
    most `block` tokens; token_index is [n, width].

    In lexicographic order each sequence shares with the trie built so far exactly its common
    prefix with the previous one, and adds its remaining tokens as new nodes: node ids follow a
    depth-first order in which every row's new tokens are consecutive."""
    order = sorted(range(len(sequences)), key=lambda i: tuple(sequences[i].tolist()))
    node_tokens, node_depth, node_parent = [], [], []
    paths: dict[int, np.ndarray] = {}
    parts = []                      # per row: [first new node, end) of its new tokens
    previous = None
    for i in order:
        seq = sequences[i]
        shared = _common_prefix(seq, sequences[previous]) if previous is not None else 0
        prefix = paths[previous][:shared] if previous is not None else np.zeros(0, np.int64)
        first = len(node_tokens)
        new = np.arange(first, first + len(seq) - shared)
        if len(new):
            node_tokens.extend(seq[shared:].tolist())
            node_depth.extend(range(shared, len(seq)))
            node_parent.extend([int(prefix[-1]) if shared else -1] + new[:-1].tolist())
            parts.append((first, first + len(new)))
        paths[i] = np.concatenate([prefix, new]).astype(np.int64)
        previous = i
    parent = np.asarray(node_parent, np.int64)
    children = np.bincount(parent[parent >= 0], minlength=len(parent))
    branching = children > 1
    # blocks: each part cut after every branching node (no block spans a branching point, so a
    # block's tokens are all ancestors of whatever hangs below it) and every `block` tokens
    block_of = np.zeros(len(node_tokens), np.int64)
    blocks: list[tuple[int, int]] = []
    for begin, end in parts:
        start = begin
        for node in range(begin, end):
            if node - start == block or (node > start and branching[node - 1]):
                blocks.append((start, node))
                start = node
            block_of[node] = len(blocks)
        blocks.append((start, end))
    return _blocks_of(blocks, block_of, node_tokens, node_depth, parent, paths, rows, width,
                      block)


def _blocks_of(blocks, block_of, node_tokens, node_depth, parent, paths, rows, width, block):
    nb = len(blocks)
    tokens = np.zeros((nb, block), np.int32)
    positions = np.zeros((nb, block), np.int32)
    lengths = np.zeros(nb, np.int32)
    predictor = np.full((nb, block), -1, np.int32)
    node_tokens, node_depth = np.asarray(node_tokens, np.int32), np.asarray(node_depth, np.int32)
    flat = np.zeros(len(node_tokens), np.int64)          # node -> block x T + offset
    for b, (start, end) in enumerate(blocks):
        n = end - start
        tokens[b, :n], positions[b, :n], lengths[b] = node_tokens[start:end], \
            node_depth[start:end], n
        flat[start:end] = b * block + np.arange(n)
    for b, (start, end) in enumerate(blocks):
        parents = parent[start:end]
        predictor[b, :end - start] = np.where(parents >= 0, flat[np.maximum(parents, 0)], -1)
    ancestors = []
    token_index = np.zeros((len(rows), width), np.int32)
    first_of = {}
    for i, path in paths.items():
        if len(path):
            token_index[i, :len(path)] = flat[path]
            path_blocks = block_of[path]
            for d in np.flatnonzero(np.r_[True, path_blocks[1:] != path_blocks[:-1]]):
                first_of.setdefault(int(path_blocks[d]), np.unique(path_blocks[:d]).tolist())
    ancestors = [first_of.get(b, []) for b in range(nb)]
    return GroupTree(np.asarray(rows), tokens, positions, lengths, ancestors, predictor,
                     token_index)


def group_trees(tokens: np.ndarray, lengths: np.ndarray, group_ids: np.ndarray,
                block: int) -> list[GroupTree]:
    """Per group (in order of first appearance) the token tree of its rows, each cut at its
    length (int[N]: the columns its loss needs; 0 drops the row)."""
    tokens, lengths = np.asarray(tokens), np.asarray(lengths)
    width = tokens.shape[1]
    out = []
    for g in dict.fromkeys(np.asarray(group_ids).tolist()):
        rows = np.flatnonzero(np.asarray(group_ids) == g)
        out.append(build_tree([tokens[i, :lengths[i]] for i in rows], rows, width, block))
    return out


def unique_fraction(trees: Sequence[GroupTree], lengths: np.ndarray) -> float:
    """Unique tokens of the trees over the tokens of their rows (1.0 for an empty batch)."""
    total = int(np.asarray(lengths).sum())
    return sum(t.unique_tokens for t in trees) / total if total else 1.0


@dataclasses.dataclass
class PackedForest:
    """Whole group trees laid into R rows (host arrays, one micro-batch's):

      tokens, positions: int32[R, NB, T]; valid: bool[R, NB, T]; ancestors: per ancestor
      class, int32[R, NB_c, A_c] (-1 pads; `jaxtree.models.tree_blocks.TreeBlocks`);
      predictor: int32[R, NB, T] (flat index in the row, -1: none);
      slots: int[R, S], the batch row of each trajectory slot of a row (-1: empty);
      token_index: int32[R, S, W], per slot the flat index in its row of each column.
    """

    tokens: np.ndarray
    positions: np.ndarray
    valid: np.ndarray
    ancestors: tuple[np.ndarray, ...]
    predictor: np.ndarray
    slots: np.ndarray
    token_index: np.ndarray


def pack_forest(trees: Sequence[GroupTree], rows: int, blocks: int, slots: int,
                ancestor_slots: int, block: int, width: int,
                classes: Sequence[tuple[int, int]] | None = None) -> PackedForest:
    """Lays `trees` into `rows` rows of `blocks` blocks and `slots` trajectory slots each,
    filling row by row in the order given (ValueError if they do not fit).

    `classes`: the ancestor classes, ((blocks, ancestor slots), ...) in increasing slots with
    the blocks summing to `blocks`; each row's blocks are ordered into them, those with the most
    ancestors into the last class (default: one class of `ancestor_slots`)."""
    out = _pack_in_tree_order(trees, rows, blocks, slots, ancestor_slots, block, width)
    return _order_into_classes(out, classes or ((blocks, ancestor_slots),), block)


def _order_into_classes(out: PackedForest, classes: Sequence[tuple[int, int]], block: int
                        ) -> PackedForest:
    """`out` (one ancestor class of every block) with each row's blocks permuted into
    `classes` by their ancestor counts, every block index (ancestors, predictors, token
    indices) following its block."""
    full = out.ancestors[0]
    rows, blocks, _ = full.shape
    if sum(n for n, _ in classes) != blocks:
        raise ValueError(f"ancestor classes {tuple(classes)} do not hold {blocks} blocks")
    counts = (full >= 0).sum(-1)                                              # [R, NB]
    sizes = [n for n, _ in classes]
    perm = np.empty((rows, blocks), np.int64)
    for row in range(rows):
        # blocks by ancestor count, most first, cut into the classes widest first; each class
        # keeps its blocks in row order
        by_count = np.argsort(-counts[row], kind="stable")
        widest_first = np.split(by_count, np.cumsum(sizes[::-1])[:-1])
        perm[row] = np.concatenate([np.sort(c) for c in reversed(widest_first)])
    class_slots = np.repeat([a for _, a in classes], sizes)                  # [NB]
    if (np.take_along_axis(counts, perm, axis=1) > class_slots).any():
        raise ValueError(f"a block has more ancestors than its class's slots {tuple(classes)}")
    inverse = np.empty_like(perm)
    np.put_along_axis(inverse, perm, np.arange(blocks)[None, :], axis=1)

    def moved(flat):  # a flat index (block x T + offset) of a row, with its block moved
        r = np.arange(rows).reshape((rows,) + (1,) * (flat.ndim - 1))
        return inverse[r, flat // block] * block + flat % block

    take = lambda x: np.take_along_axis(x, perm[:, :, None], axis=1)  # noqa: E731
    placed = take(full)
    placed = np.where(placed >= 0, inverse[np.arange(rows)[:, None, None], np.maximum(placed, 0)],
                      -1).astype(np.int32)
    bounds = np.cumsum([0] + sizes)
    ancestors = tuple(placed[:, start:end, :a]
                      for start, end, (_, a) in zip(bounds[:-1], bounds[1:], classes))
    predictor = take(out.predictor)
    predictor = np.where(predictor >= 0, moved(np.maximum(predictor, 0)), -1).astype(np.int32)
    return PackedForest(take(out.tokens), take(out.positions), take(out.valid), ancestors,
                        predictor, out.slots, moved(out.token_index).astype(np.int32))


def _pack_in_tree_order(trees: Sequence[GroupTree], rows: int, blocks: int, slots: int,
                        ancestor_slots: int, block: int, width: int) -> PackedForest:
    """`pack_forest` with every tree's blocks in its own order, one ancestor class."""
    out = PackedForest(
        np.zeros((rows, blocks, block), np.int32), np.zeros((rows, blocks, block), np.int32),
        np.zeros((rows, blocks, block), bool), (np.full((rows, blocks, ancestor_slots), -1,
                                                       np.int32),),
        np.full((rows, blocks, block), -1, np.int32), np.full((rows, slots), -1, np.int64),
        np.zeros((rows, slots, width), np.int32))
    row, used_blocks, used_slots = 0, 0, 0
    for tree in trees:
        nb, n = tree.num_blocks, len(tree.rows)
        if nb > blocks or n > slots:
            raise ValueError(f"a group of {nb} blocks and {n} trajectories does not fit a row of "
                             f"{blocks} blocks and {slots} slots")
        if used_blocks + nb > blocks or used_slots + n > slots:
            row, used_blocks, used_slots = row + 1, 0, 0
        if row >= rows:
            raise ValueError(f"the trees do not fit in {rows} rows")
        b, offset = slice(used_blocks, used_blocks + nb), used_blocks * block
        out.tokens[row, b] = tree.block_tokens
        out.positions[row, b] = tree.block_positions
        out.valid[row, b] = np.arange(block)[None, :] < tree.block_lengths[:, None]
        out.predictor[row, b] = np.where(tree.predictor >= 0, tree.predictor + offset, -1)
        for i, ancestors in enumerate(tree.ancestors):
            if len(ancestors) > ancestor_slots:
                raise ValueError(f"a block has {len(ancestors)} ancestors, more than "
                                 f"{ancestor_slots} slots")
            out.ancestors[0][row, used_blocks + i, :len(ancestors)] = np.asarray(ancestors) + \
                used_blocks
        s = slice(used_slots, used_slots + n)
        out.slots[row, s] = tree.rows
        out.token_index[row, s] = tree.token_index + offset
        used_blocks, used_slots = used_blocks + nb, used_slots + n
    return out
