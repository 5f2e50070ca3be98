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
Shapes: R rows, NB blocks per row, T tokens per block, A ancestor slots per block (padded with
-1), K key/value heads, Dh head width; the attention of one block reads (A + 1) x T keys, about
what one trajectory's attention reads, so attention memory per token is that of the
per-trajectory forward while every shared token's projections and MLP are computed once.
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
      ancestors: int32[R, NB, A], the blocks of the same row whose tokens precede the block on
        its path (any order; -1 pads).
    """

    positions: jax.Array
    valid: jax.Array
    ancestors: jax.Array


def tree_context(k: jax.Array, v: jax.Array, tree: TreeBlocks):
    """The keys, values and mask of every block's attention.

    Args:
      k, v: [B, T, K, Dh] for B = R x NB blocks (row-major).
      tree: the blocks' structure.

    Returns:
      (keys, values [B, K, (A + 1) x T, Dh] in the attention's layout, mask bool[B, T,
      (A + 1) x T]): the ancestor blocks' tokens, then the block's own.
    """
    rows, blocks, slots = tree.ancestors.shape
    batch, width, kv_heads, head_dim = k.shape
    k = k.reshape(rows, blocks, width, kv_heads, head_dim)
    v = v.reshape(rows, blocks, width, kv_heads, head_dim)
    index = jnp.maximum(tree.ancestors, 0)
    # per row, the ancestor blocks of every block: [R, NB, A, T, K, Dh]
    gather = jax.vmap(lambda x, i: x[i])
    k_ctx = jnp.concatenate([gather(k, index).reshape(rows, blocks, slots * width, kv_heads,
                                                      head_dim), k], axis=2)
    v_ctx = jnp.concatenate([gather(v, index).reshape(rows, blocks, slots * width, kv_heads,
                                                      head_dim), v], axis=2)
    ancestor_valid = gather(tree.valid, index) & (tree.ancestors >= 0)[..., None]  # [R,NB,A,T]
    causal = jnp.arange(width)[:, None] >= jnp.arange(width)[None, :]               # [T, T]
    own = causal[None, None] & tree.valid[:, :, None, :]                             # [R,NB,T,T]
    mask = jnp.concatenate([jnp.broadcast_to(
        ancestor_valid.reshape(rows, blocks, 1, slots * width),
        (rows, blocks, width, slots * width)), own], axis=-1)
    context = (slots + 1) * width
    to_layout = lambda x: x.reshape(batch, context, kv_heads, head_dim).transpose(0, 2, 1, 3)
    return to_layout(k_ctx), to_layout(v_ctx), mask.reshape(batch, width, context)
