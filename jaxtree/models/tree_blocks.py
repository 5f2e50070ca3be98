"""Token trees packed in blocks: attention where each token sees exactly its ancestors.

Trajectories of one rollout group share token prefixes (a prompt, a tree's trunk). Their token
tree (the trie of their prefixes) is cut into blocks of T consecutive tokens of one branch (a
block never spans a branching point), and a forward pass over the blocks computes every shared
token once. A block's queries attend to the tokens of its ancestor blocks (the earlier blocks of
its branch and of the branches above it, every valid token of which precedes it on its path)
and causally to its own tokens; each token is rotated by its depth in its trajectory (RoPE
position = position in the sequence it belongs to), so a token's activations are those the same
token has in any of the trajectories through it.

    tree = TreeBlocks(positions, valid, ancestors)      # R rows of NB blocks of T tokens
    hidden, _ = Transformer(config).apply({"params": p}, tokens.reshape(R * NB, T),
                                          tree=tree, return_hidden=True)

Layout: a row holds whole trees (a rollout group's, so that a row lives on one device of the
mesh); ancestors index blocks of the same row, which keeps every gather local to the row.
Shapes: R rows, NB blocks per row, T tokens per block, K key/value heads, Dh head width.

Ancestor classes: a block's attention reads its A ancestor slots x T keys plus its own T, and
its scores and softmax cost grow with A. Blocks near a tree's root have few ancestors and deep
ones many, so a row's blocks come in classes of consecutive blocks, class c with A_c slots
(`ancestors[c]`: int32[R, NB_c, A_c], sum of NB_c = NB); each class attends with its own A_c
instead of every block paying the deepest block's. The classes are a packing choice
(`jaxtree.train.forest_update`); attention over them is exact whatever they are.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class TreeBlocks(NamedTuple):
    """The tree structure of R rows of NB blocks of T tokens.

    Attributes:
      positions: int32[R, NB, T], each token's position in its trajectories (its depth).
      valid: bool[R, NB, T], a real token (False: padding at a block's end, or an empty block).
      ancestors: per ancestor class c, int32[R, NB_c, A_c]: for the row's blocks
        [sum of NB_<c, sum of NB_<=c), the blocks of the same row whose tokens precede the
        block on its path (any order; -1 pads).
    """

    positions: jax.Array
    valid: jax.Array
    ancestors: tuple[jax.Array, ...]


class ClassContext(NamedTuple):
    """One ancestor class's attention inputs: its blocks [start, start + count) of every row,
    keys and values [R x count, K, (A_c + 1) x T, Dh] (the ancestors' tokens, then the block's
    own) and mask bool[R x count, T, (A_c + 1) x T]."""

    start: int
    count: int
    keys: jax.Array
    values: jax.Array
    mask: jax.Array


def tree_contexts(k: jax.Array, v: jax.Array, tree: TreeBlocks) -> list[ClassContext]:
    """The keys, values and mask of every block's attention, one ClassContext per ancestor class.

    Args:
      k, v: [B, T, K, Dh] for B = R x NB blocks (row-major).
      tree: the blocks' structure.
    """
    rows, blocks, width = tree.valid.shape
    _, _, kv_heads, head_dim = k.shape
    k = k.reshape(rows, blocks, width, kv_heads, head_dim)
    v = v.reshape(rows, blocks, width, kv_heads, head_dim)
    gather = jax.vmap(lambda x, i: x[i])  # per row: x[NB, ...], i[n, A] -> [n, A, ...]
    causal = jnp.arange(width)[:, None] >= jnp.arange(width)[None, :]               # [T, T]
    out, start = [], 0
    for ancestors in tree.ancestors:
        count, slots = ancestors.shape[1], ancestors.shape[2]
        own = slice(start, start + count)
        index = jnp.maximum(ancestors, 0)
        context = (slots + 1) * width

        def with_own(x, own=own, index=index, count=count, slots=slots):
            # [R, n, A, T, K, Dh] ancestors' tokens, then the block's own: [R, n, (A+1)T, K, Dh]
            return jnp.concatenate([gather(x, index).reshape(
                rows, count, slots * width, kv_heads, head_dim), x[:, own]], axis=2)

        ancestor_valid = gather(tree.valid, index) & (ancestors >= 0)[..., None]    # [R,n,A,T]
        self_valid = causal[None, None] & tree.valid[:, own, None, :]               # [R,n,T,T]
        mask = jnp.concatenate([jnp.broadcast_to(
            ancestor_valid.reshape(rows, count, 1, slots * width),
            (rows, count, width, slots * width)), self_valid], axis=-1)
        to_layout = lambda x, count=count, context=context: x.reshape(  # noqa: E731
            rows * count, context, kv_heads, head_dim).transpose(0, 2, 1, 3)
        out.append(ClassContext(start, count, to_layout(with_own(k)), to_layout(with_own(v)),
                                mask.reshape(rows * count, width, context)))
        start += count
    return out
