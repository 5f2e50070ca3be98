"""Compare variants of one experiment over seeds: run them, resume them, aggregate them.

    python -m launch.compare --grid=configs/grids/<name>.py --out=DIR \
        [--only=variant,...] [--seeds=0,1] [--records=RECORDS] [--aggregate_only] [--dry_run]

Runs every variant x seed of the grid file one `launch.train` process at a time into
DIR/runs/<variant>/seed_<s> (its output teed to log.txt there), building each distinct warm start
once under DIR/warm_starts/<key> and linking it as the run's `sft`. Finished runs are skipped and
unfinished ones resumed when the same command is run again; a finished run made with other
overrides than the grid now sets is refused. Then writes DIR/results.md (printed too),
DIR/results.json and DIR/curves_<metric>.png: mean ± 95% CI over seeds of the initial, final and
best evaluation of each run. The grid format is in configs/grids/README.md; the logic is
`jaxtree.compare`.

Before anything runs, every variant x seed is validated as the typed experiment launch.train would
build (an unknown field or an invalid value is refused in one line naming the variant and the
field).

--records=RECORDS keeps each finished run's record (metrics.jsonl, train_summary.json,
config.json, run.json: kilobytes, no checkpoints) in RECORDS/<variant>/seed_<s>, saved as each run
finishes, and first restores the records of runs whose directory under DIR holds nothing: a grid
longer than its machine is held (a wiped scratch disk) resumes on a fresh one from a RECORDS
directory kept elsewhere or committed, rerunning only the runs that had not finished. The
warm start's step-0 evaluations (one per grid, shared by its runs) are kept there too, under
RECORDS/warm_starts/<key>/initial_evals, and read by the runs of a warm start rebuilt bit for bit
instead of being evaluated again (minutes on a pretrained model).

--only restricts which variants run and --seeds which seeds (default: the grid's); the results
cover every variant of the grid and every seed with a finished run. --aggregate_only only
rewrites the results; --dry_run prints the commands that would run and changes nothing.

Exit status: 0; 1 when a run failed (each is reported with the last lines of its log); 2 on bad
input or a refusal (one line, no traceback); 130 when stopped by SIGINT/SIGTERM, which is
forwarded to the running job (launch.train then saves a checkpoint).
"""

from __future__ import annotations

import sys

from absl import app, flags

from jaxtree.compare import SubprocessRunner, run_compare
from launch.common import quiet_logs

_GRID = flags.DEFINE_string("grid", None, "Grid file (configs/grids/<name>.py).")
_OUT = flags.DEFINE_string("out", None, "Output directory (runs, warm starts, results).")
_ONLY = flags.DEFINE_list("only", None, "Run only these variants (comma-separated).")
_SEEDS = flags.DEFINE_list("seeds", None, "Run these seeds instead of the grid's (e.g. 0,1).")
_RECORDS = flags.DEFINE_string("records", None, "Directory of finished runs' records: restored "
                               "first, each run's saved there once finished.")
_AGGREGATE_ONLY = flags.DEFINE_bool("aggregate_only", False, "Only aggregate existing runs.")
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print the commands that would run; run nothing.")


def main(argv):
    if len(argv) > 1:
        print(f"compare: error: unexpected arguments: {' '.join(argv[1:])}", file=sys.stderr)
        sys.exit(2)
    runner = SubprocessRunner()
    if not (_DRY_RUN.value or _AGGREGATE_ONLY.value):
        runner.forward_signals()
    sys.exit(run_compare(_GRID.value, _OUT.value, only=_ONLY.value, seeds=_SEEDS.value,
                         aggregate_only=_AGGREGATE_ONLY.value, dry_run=_DRY_RUN.value,
                         runner=runner, records=_RECORDS.value))


def _parse_flags(argv):
    try:
        parsed = flags.FLAGS(argv)
    except flags.Error as e:
        print(f"compare: error: {e}", file=sys.stderr)
        sys.exit(2)
    if not flags.FLAGS["verbosity"].present:
        quiet_logs()  # JAX's "Unable to initialize backend 'tpu'" on every call, as in launch.train
    return parsed


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
