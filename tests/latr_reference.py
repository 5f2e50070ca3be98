"""A plain-Python transcription of LATR's Algorithm 1 (tree phase), for tests.

Slots are a Python list; every branch asks the model for its next-token distribution with a full
forward over prompt + branch tokens (no cache). Follows the same specification as
`jaxtree.sampling.latr`: parents extend by argmax; candidates are all other tokens passing Eq. 5
(Alg. 1 line 11, searched over the whole vocabulary); a group's candidates take free slots in
descending probability (ties: lower slot, then higher-ranked candidate), lowest free slot first;
at step l a child born at l - r is compared over its r tokens after the branch token with its
parent's tokens there (each window cut after its EOS), normalized by the longer window (two empty
windows: distance 1); pruning removes descendants; the tree phase ends once k_tree slots are
alive and no child is younger than the largest window, or when every slot has finished (nothing
of the tree changes after that).
"""

import numpy as np


def levenshtein(a, b):
    row = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        previous, row[0] = row[0], i
        for j in range(1, len(b) + 1):
            current = min(row[j] + 1, row[j - 1] + 1, previous + (a[i - 1] != b[j - 1]))
            previous, row[j] = row[j], current
    return row[len(b)]


def _window(tokens, start, width, eos_ids):
    out = []
    for t in tokens[start:start + width]:
        out.append(t)
        if t in eos_ids:
            break
    return out


def eq5_candidates(p, tau_abs, tau_rel):
    """Alg. 1 lines 8 and 11 on one distribution p (np.ndarray[V]): (c*, candidates), where
    candidates lists (rank, token) for every c != c* with p[c] > tau_abs and
    p[c*] - p[c] < tau_rel, in descending p (ties: lower token first; rank 1 is the token ranked
    right after c*)."""
    order = np.argsort(-p, kind="stable")
    top = int(order[0])
    return top, [(rank, int(c)) for rank, c in enumerate(order[1:], start=1)
                 if p[c] > tau_abs and p[top] - p[c] < tau_rel]


def allocate(slot_probs, free, tau_abs, tau_rel):
    """One group's births at one step: slot_probs maps each extending slot to its distribution;
    free lists the free slots. The group's candidates, in descending p (ties: lower slot, then
    higher-ranked candidate), take the free slots in ascending order.

    Returns ({slot: c*}, [(parent slot, child slot, token), ...] in allocation order)."""
    tops, candidates = {}, []
    for i, p in slot_probs.items():
        tops[i], passing = eq5_candidates(np.asarray(p, np.float64), tau_abs, tau_rel)
        candidates += [(-float(p[c]), i, rank, c) for rank, c in passing]
    candidates.sort()
    return tops, [(i, j, c) for (_, i, _, c), j in zip(candidates, sorted(free))]


def latr_tree_reference(next_probs, k_tree, n, tau_abs, tau_rel, tau_ed, windows, eos_ids):
    """Runs the tree phase for one prompt.

    next_probs(tokens: list[int]) -> np.ndarray[V], the policy's next-token distribution after the
    prompt followed by `tokens`.

    Returns dict(slots: list of {tokens, parent, birth, finished} or None, branches: list of
    (step, parent slot, child slot, token), prunes: list of (step, slot, window), tree_end).
    """
    slots = [None] * k_tree
    slots[0] = {"tokens": [], "parent": -1, "birth": -1, "finished": False}
    branches, prunes = [], []
    r_max = max(windows)
    for l in range(n):
        active = [i for i, s in enumerate(slots) if s is not None and not s["finished"]]
        if not active:
            return dict(slots=slots, branches=branches, prunes=prunes, tree_end=l)
        free = [j for j in range(k_tree) if slots[j] is None]
        extensions, births = allocate({i: next_probs(slots[i]["tokens"]) for i in active}, free,
                                      tau_abs, tau_rel)
        for i, top in extensions.items():
            s = slots[i]
            s["tokens"].append(top)
            s["finished"] = top in eos_ids or len(s["tokens"]) >= n
        for i, j, c in births:
            tokens = slots[i]["tokens"][:l] + [c]
            slots[j] = {"tokens": tokens, "parent": i, "birth": l,
                        "finished": c in eos_ids or len(tokens) >= n}
            branches.append((l, i, j, c))
        removed = set()
        for r in windows:
            for j, s in enumerate(slots):
                if s is None or s["parent"] < 0 or s["birth"] != l - r or j in removed:
                    continue
                a = _window(s["tokens"], s["birth"] + 1, r, eos_ids)
                b = _window(slots[s["parent"]]["tokens"], s["birth"] + 1, r, eos_ids)
                longer = max(len(a), len(b))
                distance = levenshtein(a, b) / longer if longer else 1.0
                if distance < tau_ed:
                    removed.add(j)
                    prunes.append((l, j, r))
        changed = True
        while changed:  # descendants go with their ancestors
            changed = False
            for j, s in enumerate(slots):
                if s is not None and j not in removed and s["parent"] in removed:
                    removed.add(j)
                    changed = True
        for j in removed:
            slots[j] = None
        alive = [s for s in slots if s is not None]
        young = any(s["parent"] >= 0 and s["birth"] > l - r_max for s in alive)
        if len(alive) >= k_tree and not young:
            return dict(slots=slots, branches=branches, prunes=prunes, tree_end=l + 1)
    return dict(slots=slots, branches=branches, prunes=prunes, tree_end=n)
