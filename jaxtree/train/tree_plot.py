"""A PNG of one rollout group's tree (`jaxtree.rollout.tree_record`), for `launch.show_tree`.

One lane per branch, turns left to right. Each node is one action, labelled with its text and
coloured by the process score after it; a child's lane starts with an edge from its parent's node
before the fork. The end of each branch says how it ended: solved (green), failed (red), pruned
(grey square) or truncated (orange).
"""

from __future__ import annotations

import numpy as np

END_STYLE = {  # (marker, colour, legend)
    "solved": ("*", "tab:green", "solved"),
    "done": ("X", "tab:red", "failed"),
    "truncated": ("X", "tab:orange", "turn limit"),
    "pruned": ("s", "0.5", "pruned"),
}


def render_tree(tree: dict, path: str, title: str | None = None) -> str:
    """Draws `tree` (a `group_tree` dict) into the PNG `path`; returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    branches = tree["branches"]
    if not branches:
        raise ValueError("the tree has no branches")
    lane = {b["episode_id"]: i for i, b in enumerate(branches)}
    turns = max(len(b["actions"]) for b in branches)
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * max(turns, 1), 0.9 + 0.5 * len(branches)))
    cmap = plt.get_cmap("viridis").with_extremes(bad="0.8")
    used = set()
    for b in branches:
        y = lane[b["episode_id"]]
        start = max(b["fork_turn"], 0)
        xs = list(range(start, len(b["actions"])))
        if b["parent_id"] in lane and start > 0:
            ax.plot([start - 1, start], [lane[b["parent_id"]], y], color="0.6", lw=1, zorder=1)
        if xs:
            ax.plot(xs, [y] * len(xs), color="0.6", lw=1, zorder=1)
            # a score the rollout did not record (None) is drawn grey
            ax.scatter(xs, [y] * len(xs), c=[np.nan if b["scores"][x] is None else b["scores"][x]
                                             for x in xs], cmap=cmap, vmin=0, vmax=1,
                       plotnonfinite=True, s=60, zorder=2, edgecolors="k", linewidths=0.5)
            for x in xs:
                ax.annotate(b["actions"][x][:14], (x, y), textcoords="offset points",
                            xytext=(0, 7), ha="center", fontsize=6)
        end = "solved" if b["success"] else b["end_reason"]
        marker, colour, label = END_STYLE.get(end, ("o", "k", end))
        ax.scatter([len(b["actions"]) - 0.45], [y], marker=marker, color=colour, s=70, zorder=3,
                   label=None if label in used else label)
        used.add(label)
    mappable = plt.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, 1))
    fig.colorbar(mappable, ax=ax, label="process score", fraction=0.04, pad=0.02)
    solved = sum(b["success"] for b in branches)
    ax.set_title(title or f"task {tree['task_id']}: {len(branches)} branches, {solved} solved",
                 fontsize=9)
    ax.set_xlabel("turn")
    ax.set_yticks(range(len(branches)), [str(b["episode_id"]) for b in branches], fontsize=6)
    ax.set_ylabel("branch (episode id)")
    ax.set_xlim(-0.6, turns + 0.2)
    ax.invert_yaxis()
    ax.legend(loc="upper left", bbox_to_anchor=(1.12, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
