"""Learning-curve PNGs from a training run's metrics.jsonl (used by `launch.plot`)."""

from __future__ import annotations

import os

from jaxtree.train.metrics import read_metrics

# panel file name -> (title, [(metric key, legend label)])
PANELS = {
    "success_rate": ("success rate", [("rollout/success_rate", "training rollouts"),
                                      ("eval/success_rate", "held-out evaluation")]),
    "reward": ("episode reward", [("rollout/reward_mean", "mean reward")]),
    "entropy": ("policy entropy (nats / action token)", [("train/entropy", "entropy")]),
    "kl": ("KL to the reference policy (k3)", [("train/kl", "KL")]),
    "response_length": ("tokens per action", [("rollout/response_tokens", "response tokens")]),
    "grad_norm": ("gradient and update norms", [("train/grad_norm", "gradient"),
                                                ("train/update_norm", "update (after Adam)")]),
}


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over the records that have a finite number for it."""
    steps, values = [], []
    for record in records:
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            steps.append(record["step"])
            values.append(float(value))
    return steps, values


def plot(workdir: str, output: str | None = None) -> list[str]:
    """Writes the PNGs; returns their paths."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(workdir)
    if not records:
        raise FileNotFoundError(f"no metrics in {os.path.join(workdir, 'metrics.jsonl')}")
    output = output or os.path.join(workdir, "plots")
    os.makedirs(output, exist_ok=True)
    paths = []
    grid, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax_all, (name, (title, keys)) in zip(axes.flat, PANELS.items()):
        fig, ax = plt.subplots(figsize=(6, 4))
        for target in (ax, ax_all):
            for key, label in keys:
                steps, values = series(records, key)
                if steps:
                    target.plot(steps, values, marker="o" if len(steps) < 30 else None,
                                markersize=3, label=label)
            target.set_title(title)
            target.set_xlabel("training step")
            target.grid(alpha=0.3)
            if len(keys) > 1:
                target.legend()
        path = os.path.join(output, f"{name}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    grid.tight_layout()
    path = os.path.join(output, "curves.png")
    grid.savefig(path, dpi=100)
    plt.close(grid)
    paths.append(path)
    return paths
