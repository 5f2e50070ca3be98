"""Comparison harness: variants x seeds of one experiment, run, resumed and aggregated.

The command-line front-end is `launch.compare`; the grid file format is documented in
`configs/grids/README.md`. A grid is loaded, and every variant validated as the typed experiment
`launch.train` would build from it (`grid.load_grid`); it is turned into runs (`plan.plan_runs`),
checked against what earlier invocations recorded (`runs.check_recorded`), executed one process
at a time by a pluggable runner (`runs.execute`) and aggregated into `results.md`, `results.json`
and `curves_<metric>.png` (`results.aggregate`, `results.write_results`). Finished runs' records can
be kept apart from their checkpoints and restored on another machine (`records`).
`job.run_compare` does all of it and returns the exit status.

A runner is any callable `runner(argv, workdir, log_path) -> int` (the exit status); the default,
`runner.SubprocessRunner`, starts `argv` as a subprocess in the repository root and tees its
output to `log_path`.

Layout of an output directory:

    <out>/runs/<variant>/seed_<s>/        launch.train's workdir, plus
        run.json                          the command and overrides it was started with
        log.txt                           its stdout and stderr (appended on every attempt)
        sft -> ../../../warm_starts/<key>  the shared warm start (train.init == 'sft')
    <out>/warm_starts/<key>/              launch.sft's workdir, plus warm_start.json and log.txt
    <out>/artifacts/<name>/               an artifact job's workdir (e.g. launch.train_prm), plus
                                          artifact.json and log.txt; `{artifact:<name>}` in an
                                          override is this directory
    <out>/results.md, results.json, curves_<metric>.png
    <records>/<variant>/seed_<s>/         with --records: a finished run's metrics.jsonl,
                                          train_summary.json, config.json and run.json
                                          (`records`)
    <records>/warm_starts/<key>/initial_evals/  the warm start's shared step-0 evaluations,
                                          put back into a rebuilt warm start
"""

from jaxtree.compare.grid import DEFAULT_METRICS, Grid, GridError, ReachSpec, load_grid, \
    sibling_grid
from jaxtree.compare.job import run_compare
from jaxtree.compare.plan import WARM_START_FIELDS, Artifact, Run, WarmStart, plan_runs, \
    render_value, warm_start_key, warm_start_overrides
from jaxtree.compare.results import Interval, aggregate, first_reach, markdown_table, mean_ci, \
    reach_summary, reach_table, t_quantile, write_results
from jaxtree.compare.runner import Runner, SubprocessRunner, log_tail
from jaxtree.compare.runs import Failure, check_recorded, execute

__all__ = [
    "DEFAULT_METRICS", "WARM_START_FIELDS", "Artifact", "Failure", "Grid", "GridError", "Interval",
    "ReachSpec", "Run", "Runner", "SubprocessRunner", "WarmStart", "aggregate", "check_recorded",
    "execute", "first_reach", "load_grid", "log_tail", "markdown_table", "mean_ci", "plan_runs",
    "reach_summary", "reach_table", "render_value", "run_compare", "sibling_grid", "t_quantile",
    "warm_start_key", "warm_start_overrides", "write_results",
]
