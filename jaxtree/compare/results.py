"""Aggregating finished runs: per run the initial, final and best evaluation and the mean of every
value logged, per variant the mean ± 95% confidence interval over seeds, and with a grid's `reach`
the steps each variant needs to reach a reference variant's peak; written as results.md,
results.json and curves_<metric>.png."""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
from typing import Iterable, Mapping, Sequence

from jaxtree.compare.grid import Grid, GridError
from jaxtree.compare.plan import Run, jsonable
from jaxtree.compare.runs import is_finished, write_json
from jaxtree.train.metrics import METRICS_FILE, read_metrics
from jaxtree.train.plots import series

CONFIDENCE = 0.95
STATS = ("initial", "final", "best", "delta", "mean")
STAT_LABELS = {"initial": "initial", "final": "final", "best": "best",
               "delta": "final − initial", "mean": "mean over steps"}


# ----------------------------------------------------------------------------- statistics

def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom."""
    from scipy import stats  # imported here: ~2 s that a dry run or a bad flag need not pay

    return float(stats.t.ppf(p, df))


@dataclasses.dataclass(frozen=True)
class Interval:
    """Mean over `n` values and the half-width of its confidence interval (None when n < 2)."""
    mean: float | None
    half_width: float | None
    n: int

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci": self.half_width, "n": self.n}


def mean_ci(values: Iterable[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean ± the Student-t confidence half-width t_{(1+c)/2, n-1} · s / √n (s: sample std)."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        return Interval(None, None, 0)
    mean = math.fsum(xs) / n
    if n == 1:
        return Interval(mean, None, 1)
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1))
    return Interval(mean, t_quantile(0.5 + confidence / 2.0, n - 1) * std / math.sqrt(n), n)


# ----------------------------------------------------------------------------- aggregation

def read_series(workdir: str, metric: str) -> list[tuple[int, float]]:
    """(step, value) of the metrics.jsonl records with a number for `metric`, sorted by step (a
    step logged twice keeps its last record)."""
    try:
        records = read_metrics(workdir)
    except ValueError as e:
        raise GridError(f"{os.path.join(workdir, METRICS_FILE)} is not JSON lines: {e}") from e
    return sorted(dict(zip(*series(records, metric))).items())


def series_stats(curve: Sequence[tuple[int, float]], lower_is_better: bool = False) -> dict | None:
    """initial (the step-0 evaluation, else the first), final (the last), best, final − initial,
    and the mean of every logged value (a training metric's mean over the run's steps: what a
    rollout statistic such as a tree's expansions per step is read as)."""
    if not curve:
        return None
    initial = next(((s, v) for s, v in curve if s == 0), curve[0])
    final = curve[-1]
    best = (min if lower_is_better else max)(curve, key=lambda sv: sv[1])
    return {"initial": initial[1], "initial_step": initial[0], "final": final[1],
            "final_step": final[0], "best": best[1], "best_step": best[0],
            "delta": final[1] - initial[1], "mean": math.fsum(v for _, v in curve) / len(curve)}


def aggregation_seeds(grid: Grid, out: str, variant: str, extra: Sequence[int] = ()) -> list[int]:
    """The grid's seeds, `extra` ones, and any seed_<s> directory already under the variant."""
    seeds = set(grid.seeds) | set(extra)
    vdir = os.path.join(os.path.abspath(out), "runs", variant)
    if os.path.isdir(vdir):
        for name in os.listdir(vdir):
            m = re.fullmatch(r"seed_(-?\d+)", name)
            if m:
                seeds.add(int(m.group(1)))
    return sorted(seeds)


def _per_seed(grid: Grid, run: Run) -> dict:
    metrics = {}
    for metric in grid.metrics:
        curve = read_series(run.workdir, metric)
        summary = series_stats(curve, metric in grid.lower_is_better)
        if summary is not None:
            metrics[metric] = {**summary, "curve": [list(sv) for sv in curve]}
    return {"workdir": run.workdir, "metrics": metrics}


def _mean_curve(per_seed: Sequence[Mapping]) -> list[dict]:
    """Mean ± CI over the seeds at every step any of them evaluated."""
    points: dict[int, list[float]] = {}
    for p in per_seed:
        for step, value in p["curve"]:
            points.setdefault(step, []).append(value)
    return [{"step": step, **mean_ci(points[step]).to_dict()} for step in sorted(points)]


def first_reach(curve: Sequence[Sequence[float]], target: float,
                lower_is_better: bool = False) -> int | None:
    """The first step of `curve` ((step, value) pairs by step) whose value reaches `target`
    (≥ it, or ≤ it for a metric where lower is better); None if none does."""
    for step, value in curve:
        if (value <= target) if lower_is_better else (value >= target):
            return int(step)
    return None


# What a `reach` target is: the reference's best evaluation (LATR §4.3: "Stochastic Sampling
# requires 450 steps to reach peak performance ... LATR achieves the same level of accuracy by
# step 150") or its final one.
REACH_TARGETS = ("best", "final")


def reach_summary(grid: Grid, variants: Mapping[str, Mapping], target: str = "best"
                  ) -> dict | None:
    """The grid's `reach` measure over the aggregated `variants` (LATR §4.3: the step at which
    a variant first reaches the accuracy at which the baseline peaks; `target` "final": its
    final accuracy instead).

    Per seed, the target is the best (or the final) value of the metric in the reference
    variant's run of that seed, which that run first reached at `reference_step`; `step` is the
    first evaluation step at which the variant's run of the same seed reaches it (None: not
    within its run). Per variant: how many seeds reached it, the mean ± CI of their steps, and
    of the speed-up reference_step / step over the seeds where both are after step 0 (the shared
    step-0 evaluation reaching the target means the reference never improved on it)."""
    if target not in REACH_TARGETS:
        raise ValueError(f"target {target!r} is not one of {REACH_TARGETS}")
    spec = grid.reach
    if spec is None:
        return None
    lower = spec.metric in grid.lower_is_better
    reference = variants[spec.reference]["seeds"]
    summary = {}
    for name, v in variants.items():
        per_seed = {}
        for seed, entry in v["seeds"].items():
            ref = reference.get(seed, {}).get("metrics", {}).get(spec.metric)
            mine = entry["metrics"].get(spec.metric)
            if ref is None or mine is None:
                continue
            goal = ref[target]
            per_seed[seed] = {"target": goal,
                              "reference_step": first_reach(ref["curve"], goal, lower),
                              "step": first_reach(mine["curve"], goal, lower),
                              "last_step": mine["final_step"]}
        reached = [p for p in per_seed.values() if p["step"] is not None]
        speedups = [p["reference_step"] / p["step"] for p in reached
                    if p["step"] > 0 and p["reference_step"] > 0]
        summary[name] = {"seeds": per_seed, "compared": len(per_seed), "reached": len(reached),
                         "step": mean_ci([p["step"] for p in reached]).to_dict(),
                         "speedup": mean_ci(speedups).to_dict()}
    return {"metric": spec.metric, "reference": spec.reference, "target": target,
            "variants": summary}


def aggregate(grid: Grid, runs: Sequence[Run]) -> dict:
    """Per-seed statistics of the finished `runs` and, per variant and metric, mean ± 95% CI over
    seeds (Student t, n − 1 degrees of freedom) of each statistic, plus the mean curves."""
    variants = {}
    for variant in grid.variants:
        vruns = [r for r in runs if r.variant == variant]
        finished = [r for r in vruns if is_finished(r.workdir, r.steps)]
        seeds = {str(run.seed): _per_seed(grid, run) for run in finished}
        cells, curves = {}, {}
        for metric in grid.metrics:
            per_seed = [e["metrics"][metric] for e in seeds.values() if metric in e["metrics"]]
            cells[metric] = {stat: mean_ci([p[stat] for p in per_seed]).to_dict()
                             for stat in STATS}
            curves[metric] = _mean_curve(per_seed)
        variants[variant] = {
            "overrides": jsonable({**grid.overrides, **grid.variants[variant]}),
            "runs": len(finished),
            "missing_seeds": [r.seed for r in vruns if r not in finished],
            "seeds": seeds, "cells": cells, "curves": curves}
    return {"title": grid.title, "grid": grid.path, "config": grid.config_arg,
            "seed_field": grid.seed_field, "metrics": list(grid.metrics),
            "confidence": CONFIDENCE, "variants": variants,
            "reach": reach_summary(grid, variants),
            "reach_final": reach_summary(grid, variants, "final")}


# ----------------------------------------------------------------------------- writing

def _number(x: float) -> str:
    if abs(x) < 1e-12:          # rounding noise (e.g. the spread of equal differences)
        x = 0.0
    return f"{x:.3f}" if x == 0 or 1e-3 <= abs(x) < 1e4 else f"{x:.3g}"


def format_interval(cell: Mapping, runs: int) -> str:
    """'0.700 ± 0.127'; 'n=1' instead of an interval for one seed; '–' with no data; '(n=...)'
    added when fewer than the variant's `runs` have the metric."""
    n = cell["n"]
    if n == 0:
        return "–"
    if cell["ci"] is None:
        return f"{_number(cell['mean'])} (n={n})"
    text = f"{_number(cell['mean'])} ± {_number(cell['ci'])}"
    return text if n == runs else f"{text} (n={n})"


def markdown_table(results: Mapping) -> str:
    """variant | runs | per metric: initial, final, best, final − initial, mean over steps
    (mean ± 95% CI)."""
    header = ["variant", "runs"] + [f"{m} {STAT_LABELS[s]}" for m in results["metrics"]
                                    for s in STATS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, v in results["variants"].items():
        row = [name, str(v["runs"])] + [format_interval(v["cells"][m][s], v["runs"])
                                        for m in results["metrics"] for s in STATS]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def reach_table(reach: Mapping) -> str:
    """variant | seeds reaching the target | step | speed-up | per seed (target, reference's
    step, the variant's)."""
    lines = ["| variant | reached | step (of those) | speed-up | per seed: target, "
             f"{reach['reference']}'s step → this variant's |", "|---|---|---|---|---|"]
    for name, v in reach["variants"].items():
        seeds = "; ".join(
            f"seed {seed}: {_number(p['target'])}, {p['reference_step']} → "
            + (str(p["step"]) if p["step"] is not None else f"not by {p['last_step']}")
            for seed, p in sorted(v["seeds"].items(), key=lambda kv: int(kv[0]))) or "–"
        lines.append(f"| {name} | {v['reached']}/{v['compared']} | "
                     f"{format_interval(v['step'], v['reached'])} | "
                     f"{format_interval(v['speedup'], v['speedup']['n'])} | {seeds} |")
    return "\n".join(lines)


def results_markdown(results: Mapping) -> str:
    """results.md: title, the table and notes (missing runs, what the intervals are)."""
    parts = [f"# {results['title']}", "",
             f"Config `{results['config']}`; seeds vary `{results['seed_field']}`. Cells: mean ± "
             f"half-width of the {int(results['confidence'] * 100)}% confidence interval over "
             f"seeds (Student t, n − 1 degrees of freedom; n=1: no interval). initial: the step-0 "
             f"evaluation, final: the last one, best: the best one of each run, mean over steps: the "
             f"mean of every value a run logged (a training metric's, over its steps).", "",
             markdown_table(results), ""]
    reach = results.get("reach")
    if reach:
        parts += [f"Steps to reach {reach['reference']}'s peak {reach['metric']} (LATR's "
                  f"acceleration measure): per seed, the first evaluation step at which a "
                  f"variant's {reach['metric']} reaches the best value the {reach['reference']} "
                  f"run of the same seed reached; speed-up = {reach['reference']}'s step / the "
                  f"variant's, over seeds where both are after step 0.", "",
                  reach_table(reach), ""]
    final = results.get("reach_final")
    if final:
        parts += [f"Steps to reach {final['reference']}'s final {final['metric']}: the same, "
                  f"with the value of the {final['reference']} run's last evaluation as the "
                  f"target ({final['reference']}'s step: where its run first reached that "
                  f"value).", "", reach_table(final), ""]
    missing = [f"{name} (seeds {', '.join(map(str, v['missing_seeds']))})"
               for name, v in results["variants"].items() if v["missing_seeds"]]
    if missing:
        parts += [f"Not finished, left out: {'; '.join(missing)}.", ""]
    return "\n".join(parts)


def metric_file_name(metric: str) -> str:
    """'eval/pass@1' -> 'curves_eval_pass_1.png'."""
    return f"curves_{re.sub(r'[^A-Za-z0-9_.-]+', '_', metric).strip('_')}.png"


def plot_curves(results: Mapping, out: str) -> list[str]:
    """curves_<metric>.png: per variant the mean over seeds at each evaluation step, the 95% CI
    as a shaded band (where n ≥ 2)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    logging.getLogger("matplotlib").setLevel(logging.WARNING)

    paths = []
    for metric in results["metrics"]:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        drawn = False
        for name, v in results["variants"].items():
            curve = v["curves"].get(metric) or []
            if not curve:
                continue
            steps = [p["step"] for p in curve]
            line, = ax.plot(steps, [p["mean"] for p in curve],
                            marker="o" if len(steps) < 30 else None, markersize=3,
                            label=f"{name} (n={v['runs']})")
            if any(p["ci"] is not None for p in curve):
                lo = [p["mean"] - p["ci"] if p["ci"] is not None else math.nan for p in curve]
                hi = [p["mean"] + p["ci"] if p["ci"] is not None else math.nan for p in curve]
                ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2, linewidth=0)
            drawn = True
        if drawn:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no finished runs", ha="center", va="center",
                    transform=ax.transAxes)
        ax.set_title(f"{results['title']}: {metric} (mean, {int(results['confidence'] * 100)}% "
                     f"CI over seeds)", fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        path = os.path.join(out, metric_file_name(metric))
        fig.savefig(path, dpi=100)
        plt.close(fig)
        paths.append(path)
    return paths


def write_results(results: Mapping, out: str) -> list[str]:
    """Writes results.md, results.json and the curves; returns their paths."""
    os.makedirs(out, exist_ok=True)
    md = os.path.join(out, "results.md")
    with open(md, "w") as f:
        f.write(results_markdown(results))
    js = os.path.join(out, "results.json")
    write_json(js, results)
    return [md, js] + plot_curves(results, out)
