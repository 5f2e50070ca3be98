"""Evaluates a policy on held-out tasks, next to the oracle and a random policy.

    python -m launch.evaluate --config=configs/frozen_lake_sft.py --checkpoint=/tmp/fl_sft

--checkpoint is a jaxtree workdir / checkpoint, a Hugging Face directory or a preset (default:
config.model.name). Tasks are the fixed held-out seeds (`jaxtree.tasks.eval_seeds`), disjoint from
every training seed; each is played `eval.samples_per_task` times (config section `eval`, the same
evaluation the RL job runs during training). Prints a table and writes JSON to --output (default:
<checkpoint>/eval.json for a checkpoint directory), with --transcripts episodes as text next to it
(transcripts.jsonl and transcripts.txt). Without --output, a preset or a read-only checkpoint
directory leaves the results unwritten, saying so; an --output that cannot be written stops the job
before it evaluates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

from absl import flags
from ml_collections import config_flags

from jaxtree import evaluation
from jaxtree.experiment import Experiment
from jaxtree.tasks import eval_seeds
from jaxtree.utils import check_writable, print_table
from launch.common import fail, load_named_policy, run_app

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment config file.",
                                          lock_config=True)
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Policy to evaluate (default: "
                                  "config.model.name).")
_OUTPUT = flags.DEFINE_string("output", None, "JSON output path (default: <checkpoint>/eval.json "
                              "for a checkpoint directory).")
_TRANSCRIPTS = flags.DEFINE_integer("transcripts", None, "Episodes written as transcripts next to "
                                    "the JSON output (default: config.eval.transcripts; 0: none).",
                                    lower_bound=0)


def writable(directory: str) -> bool:
    """Whether a file can be created in the existing `directory`."""
    if not os.path.isdir(directory):
        return False
    try:
        check_writable(directory)
    except OSError:
        return False
    return True


def output_path(spec: str, output: str | None) -> tuple[str | None, str | None]:
    """(the JSON path to write, None) or (None, why the results stay unwritten) for the policy
    `spec` (--checkpoint or config.model.name). An --output that cannot be written ends the job
    here, before the evaluation's minutes are spent."""
    if output is not None:
        if os.path.isdir(output):
            fail(f"--output={output} is a directory; name the JSON file to write")
        directory = os.path.dirname(os.path.abspath(output))
        try:
            check_writable(directory)
        except OSError as e:
            fail(f"--output={output}: {directory} is not a writable directory "
                 f"({e.strerror or e})")
        if os.path.exists(output) and not os.access(output, os.W_OK):
            fail(f"--output={output} is not writable")
        return output, None
    if not os.path.isdir(spec):
        return None, f"{spec!r} is not a checkpoint directory"
    if not writable(spec):
        return None, f"{spec} is not writable"
    return os.path.join(spec, "eval.json"), None


def run(config, checkpoint: str | None, output: str | None,
        transcripts: int | None = None) -> dict:
    exp = Experiment.from_config(config)
    e = exp.eval if transcripts is None else dataclasses.replace(exp.eval, transcripts=transcripts)
    output, not_written = output_path(exp.model.name if checkpoint is None else checkpoint,
                                      output)
    make_env = exp.env.eval_factory()
    policy = load_named_policy("--checkpoint", lambda: exp.model.load(checkpoint))
    k = e.samples_per_task

    start = time.perf_counter()
    evaluator = evaluation.Evaluator(policy.config, policy.tokenizer, make_env,
                                     exp.rollout.engine(), e)
    evaluated = evaluator(policy.params)
    rows = {"policy": evaluated.metrics}
    seconds = time.perf_counter() - start
    tasks = eval_seeds(e.num_tasks)
    for reference in ("oracle", "random"):
        rows[reference] = evaluation.metrics(
            evaluation.play_reference(make_env, tasks, reference, k, seed=e.seed), k)

    columns = list(rows["policy"])
    for name in ("oracle", "random"):
        columns += [c for c in rows[name] if c not in columns]
    print(f"evaluation of {policy.source} on {exp.env.name}: {e.num_tasks} held-out tasks x "
          f"{k} samples, temperature {e.temperature} ({seconds:.0f}s)")
    print_table(["policy"] + columns,
                [[name] + [_fmt(row.get(c)) for c in columns] for name, row in rows.items()])
    result = {"checkpoint": policy.source, "env": exp.env.to_dict(), "eval": e.to_dict(),
              "seconds": seconds, "rows": rows}
    if output is None:
        print(f"results not written: {not_written} (pass --output=PATH)")
        return result
    with open(output, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {output}")
    if evaluated.transcripts:
        paths = evaluation.write_transcripts(os.path.dirname(os.path.abspath(output)),
                                             "transcripts", evaluated.transcripts)
        print(f"wrote {len(evaluated.transcripts)} transcripts: {' '.join(paths)}")
    return result


def _fmt(value) -> str:
    """Table cell: counts as integers, metrics with 3 decimals."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def main(argv):
    if len(argv) > 1:
        fail(f"unexpected arguments: {argv[1:]}")
    run(_CONFIG.value, _CHECKPOINT.value, _OUTPUT.value, _TRANSCRIPTS.value)


if __name__ == "__main__":
    flags.mark_flag_as_required("config")
    run_app(main)
