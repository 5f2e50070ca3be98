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
            p(c*) - p(c) < τ_rel (softmax of the raw logits, Eq. 5; every token that can pass is
            considered, `branch.num_candidates`). A group's candidates are ranked by descending
            p(c) (ties: lower slot, then higher-ranked candidate) and take the group's free tree
            slots in ascending order until the group's k_tree tree slots are alive. The child
            copies its parent's cache row, token row and log-prob row on device (the shared
            prefix is never recomputed) and gets c at position l.
  prune     a child born at step b is checked at steps b + r for each lookahead window r (default
            20, 30, 50; Alg. 1 line 23): its r tokens after the branch token (positions b+1..b+r)
            against its parent's tokens at the same positions, by normalized Levenshtein distance
            on device. Under τ_ed, the child and all its descendants are removed and their slots
            freed (Eq. 7-8). Being kept needs every window to pass (App. B.3).
  saturate  once a group has k_tree alive tree slots and no alive child younger than the largest
            window, its tree phase ends (§3.3 early stopping) and all its slots sample
            stochastically from step l + 1 on. So does the tree phase of a group whose tree
            branches have all finished: nothing of its tree changes after that (no late prune),
            whichever groups share its batch.

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

Once every group's tree phase is over (or n steps have passed), the loop hands the running rows to
the sampler's decode loop (`sampler.decode_with_uniforms`) without the tree bookkeeping, which
finishes them, each at its own position, with the draws the tree loop would have used.

Hybrid rollout (§3.3): slots [0, k_tree) of a group run LATR, slots [k_tree, k) plain sampling, in
the same batch; k_tree = round(η·k) is a traced input, so annealing η never recompiles.

The package (shapes in each module's docstrings):

  config.py       LatrConfig (a typed config section) and the named constants (origins, fill values)
  state.py        the typed tree state (TreeState, RowLayout, LookaheadFrontier, Events)
  branch.py       extend and branch: top tokens, Eq. 5 candidates, slot assignment, births
  prune.py        lookahead windows, the edit-distance frontier, descendant removal
  completion.py   fresh / restart (inside the loop) and duplicate (at the end) completion
  events.py       the bounded branch and prune logs
  rows.py         the chunked copy of a step's pending row pairs, per-row token writes
  plain_phase.py  the plain sampling after the tree phase (the sampler's decode loop)
  output.py       LatrOutput, assembled from the final state
  kernel.py       latr_generate: prefill, the tree loop composing the parts, the plain phase

The group size k is a static argument of the kernel, not a LatrConfig field:

  latr_generate(model_config, latr, sampling, k, max_new_tokens, pad_id, params, prompt_tokens,
                prompt_lengths, group_ids, num_tree_slots, rng, eos_ids) -> LatrOutput
"""

from jaxtree.sampling.latr.config import (COMPLETIONS, COPY_CHUNK, DUPLICATE, FRESH, NO_EVENT,
                                          NO_FORK, NO_PARENT, NOT_BORN, PLAIN, TREE, LatrConfig)
from jaxtree.sampling.latr.kernel import latr_generate, latr_generate_jit, latr_generate_sharded
from jaxtree.sampling.latr.output import LatrOutput
from jaxtree.sampling.latr.prune import with_descendants
from jaxtree.sampling.latr.state import TreeState

__all__ = [
    "COMPLETIONS", "COPY_CHUNK", "DUPLICATE", "FRESH", "NO_EVENT", "NO_FORK", "NO_PARENT",
    "NOT_BORN", "PLAIN", "TREE", "LatrConfig", "LatrOutput", "TreeState", "latr_generate",
    "latr_generate_jit", "latr_generate_sharded", "with_descendants",
]
