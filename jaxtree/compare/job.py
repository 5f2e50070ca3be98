"""The whole `launch.compare` job: load the grid, refuse mixed results, run what is not finished
(or only print it), aggregate."""

from __future__ import annotations

import os
import shlex
import sys
from typing import Callable, Sequence, TextIO

from jaxtree.compare.grid import GridError, load_grid
from jaxtree.compare.plan import Run, plan_runs
from jaxtree.compare.records import has_record, record_seeds, restore_evaluations, \
    restore_records, save_evaluations, save_record
from jaxtree.compare.results import aggregate, aggregation_seeds, markdown_table, \
    metric_file_name, reach_table, write_results
from jaxtree.compare.runner import Runner, SubprocessRunner, as_runner, stop_requested
from jaxtree.compare.runs import Failure, OutputLock, check_recorded, execute, is_built, \
    run_state


def parse_seeds(values: Sequence[str] | None) -> tuple[int, ...] | None:
    if not values:
        return None
    try:
        seeds = tuple(int(v) for v in values)
    except ValueError as e:
        raise GridError(f"--seeds must be integers, got {','.join(values)}") from e
    if len(set(seeds)) != len(seeds):
        raise GridError(f"--seeds has duplicates: {','.join(values)}")
    return seeds


def print_plan(todo: Sequence[Run], say: Callable[[str], None], records: str | None = None
               ) -> None:
    """--dry_run: each run's state and, unless finished, its command (and those of the warm start
and artifacts it needs). A run that `records` holds finished and its directory holds nothing of
is shown finished: a real invocation restores it instead of running it."""
    shown = set()
    for run in todo:
        state = run_state(run)
        if records and state == "new" and has_record(records, run):
            say(f"# {run.label}: finished (skipped; restored from the records)")
            continue
        needed = run.artifacts + ([run.warm_start] if run.warm_start is not None else [])
        for ws in needed if state != "finished" else ():
            if (ws.WHAT, ws.key) in shown:
                continue
            shown.add((ws.WHAT, ws.key))
            built = is_built(ws)
            say(f"# {ws.WHAT} {ws.key}: {'built' if built else 'to build'}")
            if not built:
                say(shlex.join(ws.argv))
        say(f"# {run.label}: {state}{' (skipped)' if state == 'finished' else ''}")
        if state != "finished":
            say(shlex.join(run.argv))


def keep(records: str, run: Run) -> None:
    """Saves a finished run's record, and the shared step-0 evaluations of its warm start (those
    an unfinished run wrote as well: each is a whole file, and rebuilding it costs an
    evaluation)."""
    save_record(records, run)
    if run.warm_start is not None and os.path.isdir(run.warm_start.workdir):
        save_evaluations(records, run.warm_start)


def put_back(records: str, run: Run) -> None:
    """Before a run starts: the recorded step-0 evaluations of its warm start, which the run
    reads instead of evaluating again when its warm start was rebuilt bit for bit."""
    if run.warm_start is not None:
        restore_evaluations(records, run.warm_start)


def run_compare(grid_path: str | None, out: str | None, *, only: Sequence[str] | None = None,
                seeds: Sequence[str] | None = None, aggregate_only: bool = False,
                dry_run: bool = False, runner: Runner | None = None,
                records: str | None = None,
                stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    """The whole `launch.compare` job. Returns the exit status: 0, 1 (some run failed), 2 (bad
    input or a refusal, reported in one line on `stderr`) or 130 (stopped by a signal).

    `records`: a directory of finished runs' records (`jaxtree.compare.records`): restored into
    empty run directories first, and each run's record saved there once it is finished."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    runner = as_runner(runner or SubprocessRunner(echo=stdout))

    def say(text: str) -> None:
        print(text, file=stdout, flush=True)

    try:
        if not grid_path:
            raise GridError("--grid is required")
        if not out:
            raise GridError("--out is required")
        if records and os.path.exists(records) and not os.path.isdir(records):
            raise GridError(f"--records {records} is not a directory")
        grid = load_grid(grid_path)
        selected = list(grid.variants)
        if only:
            unknown = [v for v in only if v not in grid.variants]
            if unknown:
                raise GridError(f"unknown variant(s) in --only: {', '.join(unknown)}; the grid "
                                f"has {', '.join(grid.variants)}")
            selected = [v for v in grid.variants if v in set(only)]
        run_seeds = parse_seeds(seeds)
        todo = plan_runs(grid, out, selected, run_seeds)
        # Aggregation covers every variant and every seed planned now, found under <out> or
        # held by the records.
        all_runs = [r for v in grid.variants
                    for r in plan_runs(grid, out, [v], aggregation_seeds(
                        grid, out, v, tuple(run_seeds or ()) +
                        tuple(record_seeds(records, v) if records else ())))]
        if dry_run:
            check_recorded(all_runs, ("finished",), out)
            check_recorded(todo, ("finished", "resume"), out)
            print_plan(todo, say, records)
            return 0
        if records:
            restore_records(all_runs, records, say)
        check_recorded(all_runs, ("finished",), out)
        if not aggregate_only:
            check_recorded(todo, ("finished", "resume"), out)
        failures: list[Failure] = []
        if not aggregate_only:
            with OutputLock(os.path.abspath(out)):
                failures = execute(todo, runner, say,
                                   on_finished=(lambda run: keep(records, run)) if records
                                   else None,
                                   before_run=(lambda run: put_back(records, run)) if records
                                   else None)
        if records:
            for run in all_runs:  # also those finished before --records was given
                keep(records, run)
        results = aggregate(grid, all_runs)
        write_results(results, os.path.abspath(out))
    except GridError as e:
        print(f"compare: error: {e}", file=stderr, flush=True)
        return 2
    say("")
    say(markdown_table(results))
    for key, target in (("reach", "peak"), ("reach_final", "final")):
        reach = results.get(key)
        if reach:
            say(f"\nsteps to reach {reach['reference']}'s {target} {reach['metric']}:")
            say(reach_table(reach))
    say(f"\nwrote {os.path.join(out, 'results.md')}, results.json and "
        f"{', '.join(metric_file_name(m) for m in grid.metrics)}")
    if stop_requested(runner):
        say("compare: stopped by a signal; run the same command again to resume")
    if failures:
        say(f"\ncompare: {len(failures)} failure(s):")
        for failure in failures:
            say(failure.report())
        return 1
    return 130 if stop_requested(runner) else 0
